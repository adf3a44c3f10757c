/* JSON texts of an Arrow string column, read straight from its buffers.
 *
 * The compiled twin of transforms/jsontext.py's pure-Python routines, which
 * state what each one computes (litmus_score.scoring.rules is the semantics):
 *
 *   too_deep  whether json_depth of each text is above a bound;
 *   objects   whether each text is a JSON object, as parse_json_object says;
 *   same      whether two texts are the same JSON value, as canonical_json says;
 *   extract   the values at some key paths, as typed columns (the policy's Values).
 *
 * Every routine works on (offsets, data, offset, length, wide) of a string
 * array and a list of row positions, writes into output buffers the caller
 * allocated, checks every offset, row and size against its buffer, and runs
 * without the GIL. Where a text needs what C does not settle exactly (nesting
 * beyond the depth bound, an integer Python might refuse to read, a number
 * beyond 64 bits to compare with a float) the row's status says UNSURE and
 * the caller asks Python. Nothing recurses deeper than the depth bound: the
 * parser keeps an explicit stack, and comparison recurses at most as deep as
 * the parser nested.
 */

#define PY_SSIZE_T_CLEAN
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strtod_l, newlocale */
#endif
#include <Python.h>

#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__APPLE__)
#include <xlocale.h>
#endif

#if defined(__GLIBC__) || defined(__APPLE__)
#define HAVE_STRTOD_L 1
#define EXACT_FLOATS 1
#else
#define EXACT_FLOATS 0 /* no locale-free strtod: every float is handed to Python */
#endif

/* The deepest nesting any routine parses (litmus_score.scoring.trajectory.MAX_JSON_DEPTH_LIMIT). */
#define DEPTH_LIMIT 256
/* Python refuses integers longer than sys.get_int_max_str_digits(), which is at least 640 (or 0, no limit). */
#define MAX_INT_DIGITS 640

enum { STATUS_NO = 0, STATUS_YES = 1, STATUS_UNSURE = 2 };
enum { PARSED = 0, INVALID = 1, UNSURE = 2, NO_MEMORY = 3 };
enum { K_NULL, K_FALSE, K_TRUE, K_INT, K_BIGINT, K_FLOAT, K_STRING, K_ARRAY, K_OBJECT };
/* Kind codes of transforms.policy (ABSENT, NULL, BOOL, NUMBER, STRING, LIST, OBJECT). */
enum { V_ABSENT, V_NULL, V_BOOL, V_NUMBER, V_STRING, V_LIST, V_OBJECT };

#define NONE ((size_t)-1)

typedef struct {
    uint8_t kind;
    uint8_t lone;     /* a string holding a lone surrogate escape */
    const uint8_t *s; /* a string's bytes, decoded: in the text where it has no escape, else in sbuf */
    size_t size;
    const uint8_t *key; /* an object member's key, decoded likewise */
    size_t key_size;
    size_t a, b;      /* a number: its token [a, b) in the text */
    int64_t integer;  /* K_INT */
    size_t first, next; /* first child, next sibling */
    size_t count;     /* children of an array, members of an object */
    size_t sorted, unique; /* object: members sorted by key, duplicates dropped (the last kept), in idx */
} Node;

typedef struct {
    const uint8_t *text;
    size_t len;
    Node *nodes;
    size_t n_nodes, cap_nodes;
    uint8_t *sbuf;
    size_t s_len, s_cap;
    size_t *idx, *tmp;
    size_t idx_len, idx_cap, tmp_cap;
    char *number;
    size_t number_cap;
    int sorted; /* objects' member lists are built */
    int decode; /* strings are decoded into sbuf */
    uint8_t root; /* the kind of the text's value */
} Parser;

#ifdef HAVE_STRTOD_L
static locale_t c_locale;
#endif

/* ---------------------------------------------------------------- columns */

typedef struct {
    Py_buffer offsets, data;
    int has_offsets, has_data;
    int wide;
    Py_ssize_t offset, length;
} Column;

static void column_release(Column *c)
{
    if (c->has_offsets)
        PyBuffer_Release(&c->offsets);
    if (c->has_data)
        PyBuffer_Release(&c->data);
    c->has_offsets = c->has_data = 0;
}

static int column_get(Column *c, PyObject *offsets, PyObject *data, Py_ssize_t offset, Py_ssize_t length, int wide)
{
    memset(c, 0, sizeof(*c));
    c->wide = wide;
    c->offset = offset;
    c->length = length;
    if (offset < 0 || length < 0) {
        PyErr_SetString(PyExc_ValueError, "negative offset or length");
        return -1;
    }
    if (PyObject_GetBuffer(offsets, &c->offsets, PyBUF_SIMPLE) < 0)
        return -1;
    c->has_offsets = 1;
    if (data != Py_None) {
        if (PyObject_GetBuffer(data, &c->data, PyBUF_SIMPLE) < 0) {
            column_release(c);
            return -1;
        }
        c->has_data = 1;
    }
    size_t width = wide ? 8 : 4;
    if (length > 0 && ((size_t)c->offsets.len / width < (size_t)offset + (size_t)length + 1)) {
        PyErr_SetString(PyExc_ValueError, "offsets buffer too short for the array");
        column_release(c);
        return -1;
    }
    return 0;
}

/* The bytes of text `row`; 0, or -1 when the row or its offsets are out of bounds. */
static int column_text(const Column *c, int64_t row, const uint8_t **start, size_t *len)
{
    if (row < 0 || row >= c->length)
        return -1;
    size_t at = (size_t)c->offset + (size_t)row;
    int64_t begin, end;
    const char *offsets = (const char *)c->offsets.buf;
    if (c->wide) {
        memcpy(&begin, offsets + at * 8, 8);
        memcpy(&end, offsets + at * 8 + 8, 8);
    } else {
        int32_t b32, e32;
        memcpy(&b32, offsets + at * 4, 4);
        memcpy(&e32, offsets + at * 4 + 4, 4);
        begin = b32;
        end = e32;
    }
    Py_ssize_t size = c->has_data ? c->data.len : 0;
    if (begin < 0 || end < begin || end > size)
        return -1;
    *start = c->has_data ? (const uint8_t *)c->data.buf + begin : (const uint8_t *)"";
    *len = (size_t)(end - begin);
    return 0;
}

/* A writable (or readable) buffer holding exactly `count` items of `itemsize` bytes. */
static int get_sized(PyObject *object, Py_buffer *view, size_t itemsize, size_t count, int writable, const char *name)
{
    if (PyObject_GetBuffer(object, view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0)
        return -1;
    if ((size_t)view->len != itemsize * count) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zu bytes, got %zd", name, itemsize * count, view->len);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- parser */

static void parser_free(Parser *p)
{
    free(p->nodes);
    free(p->sbuf);
    free(p->idx);
    free(p->tmp);
    free(p->number);
    memset(p, 0, sizeof(*p));
}

static int grow(void **buffer, size_t *cap, size_t need, size_t item)
{
    if (need <= *cap)
        return 0;
    size_t cap_new = *cap ? *cap : 16;
    while (cap_new < need) {
        if (cap_new > ((size_t)-1) / 2 / item)
            return -1;
        cap_new *= 2;
    }
    void *grown = realloc(*buffer, cap_new * item);
    if (!grown)
        return -1;
    *buffer = grown;
    *cap = cap_new;
    return 0;
}

static size_t new_node(Parser *p, uint8_t kind)
{
    if (grow((void **)&p->nodes, &p->cap_nodes, p->n_nodes + 1, sizeof(Node)) < 0)
        return NONE;
    /* Field by field: a memset of the whole node costs more than parsing a short value. */
    Node *n = &p->nodes[p->n_nodes];
    n->kind = kind;
    n->lone = 0;
    n->s = n->key = NULL;
    n->size = n->key_size = n->count = 0;
    n->first = n->next = NONE;
    return p->n_nodes++;
}

static int is_space(uint8_t c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int is_digit(uint8_t c)
{
    return c >= '0' && c <= '9';
}

static int hex_value(uint8_t c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Bytes a string literal copies as they are: printable ASCII but the quote and the backslash. */
static int plain_byte(uint8_t c)
{
    return c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
}

#if defined(__SSE2__) && defined(__GNUC__)
#include <emmintrin.h>
#define FAST_SCAN 1
#endif

/* The index of the lowest set bit of a non-zero mask. */
static unsigned ctz16(unsigned mask)
{
#ifdef __GNUC__
    return (unsigned)__builtin_ctz(mask);
#else
    unsigned k = 0;
    while (!(mask & 1u)) {
        mask >>= 1;
        k++;
    }
    return k;
#endif
}

/* How many bytes from s on are plain (16 at a time where SSE2 is there). */
static size_t plain_run(const uint8_t *s, size_t n)
{
    size_t i = 0;
#ifdef FAST_SCAN
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
    for (; i + 16 <= n; i += 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(s + i));
        /* Signed: a control byte and a non-ASCII byte (0x80 and up) are both below 0x20. */
        __m128i special = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, backslash)),
                                       _mm_cmplt_epi8(x, space));
        int mask = _mm_movemask_epi8(special);
        if (mask)
            return i + ctz16((unsigned)mask);
    }
#endif
    while (i < n && plain_byte(s[i]))
        i++;
    return i;
}

/* Four hex digits at text[at..at+4), or -1. */
static int32_t hex4(const uint8_t *text, size_t len, size_t at)
{
    if (at > len || len - at < 4)
        return -1;
    int32_t value = 0;
    for (size_t i = 0; i < 4; i++) {
        int digit = hex_value(text[at + i]);
        if (digit < 0)
            return -1;
        value = value * 16 + digit;
    }
    return value;
}

/* The length of the well-formed UTF-8 sequence at s (RFC 3629: no overlong
 * forms, no surrogates, at most U+10FFFF), or 0. */
static size_t utf8_length(const uint8_t *s, size_t avail)
{
    uint8_t c = s[0];
    if (c < 0x80)
        return 1;
    if (c < 0xC2)
        return 0;
    if (c < 0xE0)
        return avail >= 2 && (s[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c < 0xF0) {
        uint8_t low = c == 0xE0 ? 0xA0 : 0x80, high = c == 0xED ? 0x9F : 0xBF;
        return avail >= 3 && s[1] >= low && s[1] <= high && (s[2] & 0xC0) == 0x80 ? 3 : 0;
    }
    if (c < 0xF5) {
        uint8_t low = c == 0xF0 ? 0x90 : 0x80, high = c == 0xF4 ? 0x8F : 0xBF;
        return avail >= 4 && s[1] >= low && s[1] <= high && (s[2] & 0xC0) == 0x80 && (s[3] & 0xC0) == 0x80 ? 4 : 0;
    }
    return 0;
}

/* Code point `cp` as UTF-8 (a lone surrogate as its three-byte form, which
 * no valid text holds, so equal bytes still mean equal strings). */
static void put_code_point(Parser *p, uint32_t cp)
{
    uint8_t *out = p->sbuf + p->s_len;
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        p->s_len += 1;
    } else if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        p->s_len += 2;
    } else if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        p->s_len += 3;
    } else {
        out[0] = (uint8_t)(0xF0 | (cp >> 18));
        out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
        out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[3] = (uint8_t)(0x80 | (cp & 0x3F));
        p->s_len += 4;
    }
}

/* The string literal at text[*pos] (a quote), decoded as json.loads decodes
 * it: control characters refused, a high surrogate escape followed by a low
 * one joined, any other surrogate escape kept alone (`lone`). A literal
 * without escapes is its own decoding (*out points into the text); others
 * are decoded into sbuf when the parser decodes. */
static int parse_string(Parser *p, size_t *pos, const uint8_t **out, size_t *size, uint8_t *lone)
{
    const uint8_t *text = p->text;
    size_t len = p->len, start = *pos + 1, i = start;
    *lone = 0;
    for (;;) {
        i += plain_run(text + i, len - i);
        if (i >= len)
            return INVALID;
        uint8_t c = text[i];
        if (c == '"') {
            *out = text + start;
            *size = i - start;
            *pos = i + 1;
            return PARSED;
        }
        if (c == '\\')
            break;
        size_t n = c < 0x20 ? 0 : utf8_length(text + i, len - i);
        if (!n)
            return INVALID;
        i += n;
    }
    /* An escape: what came before it is copied, the rest decoded. sbuf holds
     * the text's length, and decoding never makes a string longer than its literal. */
    int decode = p->decode;
    size_t first = p->s_len;
    if (decode) {
        memcpy(p->sbuf + p->s_len, text + start, i - start);
        p->s_len += i - start;
    }
    for (;;) {
        size_t run = plain_run(text + i, len - i);
        if (decode) {
            memcpy(p->sbuf + p->s_len, text + i, run);
            p->s_len += run;
        }
        i += run;
        if (i >= len)
            return INVALID;
        uint8_t c = text[i];
        if (c == '"')
            break;
        if (c < 0x20)
            return INVALID;
        if (c == '\\') {
            if (i + 1 >= len)
                return INVALID;
            uint8_t e = text[i + 1];
            const char *simple = strchr("\"\\/bfnrt", e);
            if (e && simple) {
                static const uint8_t decoded[] = {'"', '\\', '/', '\b', '\f', '\n', '\r', '\t'};
                if (decode)
                    p->sbuf[p->s_len++] = decoded[simple - "\"\\/bfnrt"];
                i += 2;
                continue;
            }
            if (e != 'u')
                return INVALID;
            int32_t cp = hex4(text, len, i + 2);
            if (cp < 0)
                return INVALID;
            i += 6;
            if (cp >= 0xD800 && cp <= 0xDBFF && i + 1 < len && text[i] == '\\' && text[i + 1] == 'u') {
                int32_t low = hex4(text, len, i + 2);
                if (low < 0)
                    return INVALID; /* json refuses a bad escape after a high surrogate too */
                if (low >= 0xDC00 && low <= 0xDFFF) {
                    if (decode)
                        put_code_point(p, 0x10000 + (((uint32_t)cp - 0xD800) << 10) + ((uint32_t)low - 0xDC00));
                    i += 6;
                    continue;
                }
            }
            if (cp >= 0xD800 && cp <= 0xDFFF)
                *lone = 1;
            if (decode)
                put_code_point(p, (uint32_t)cp);
            continue;
        }
        size_t n = utf8_length(text + i, len - i);
        if (!n)
            return INVALID;
        if (decode) {
            memcpy(p->sbuf + p->s_len, text + i, n);
            p->s_len += n;
        }
        i += n;
    }
    *out = decode ? p->sbuf + first : text + start;
    *size = decode ? p->s_len - first : 0;
    *pos = i + 1;
    return PARSED;
}

/* The number token at text[*pos] (JSON's grammar, as json.loads reads it). */
static int parse_number(Parser *p, size_t *pos, Node *node)
{
    const uint8_t *text = p->text;
    size_t len = p->len, i = *pos, start = *pos;
    int negative = 0, integral = 1;
    if (text[i] == '-') {
        negative = 1;
        i++;
    }
    if (i >= len || !is_digit(text[i]))
        return INVALID;
    size_t digits_start = i;
    if (text[i] == '0')
        i++;
    else
        while (i < len && is_digit(text[i]))
            i++;
    size_t digits = i - digits_start;
    if (i < len && text[i] == '.') {
        if (i + 1 >= len || !is_digit(text[i + 1]))
            return INVALID;
        i += 2;
        while (i < len && is_digit(text[i]))
            i++;
        integral = 0;
    }
    if (i < len && (text[i] == 'e' || text[i] == 'E')) {
        i++;
        if (i < len && (text[i] == '+' || text[i] == '-'))
            i++;
        if (i >= len || !is_digit(text[i]))
            return INVALID;
        while (i < len && is_digit(text[i]))
            i++;
        integral = 0;
    }
    node->a = start;
    node->b = i;
    *pos = i;
    if (!integral) {
        node->kind = K_FLOAT;
        return PARSED;
    }
    if (digits > MAX_INT_DIGITS)
        return UNSURE;
    /* Magnitude in uint64; beyond int64 it is a BIGINT, compared by its digits. */
    uint64_t magnitude = 0;
    int overflow = 0;
    for (size_t k = digits_start; k < digits_start + digits; k++) {
        uint64_t digit = (uint64_t)(text[k] - '0');
        if (magnitude > (UINT64_MAX - digit) / 10) {
            overflow = 1;
            break;
        }
        magnitude = magnitude * 10 + digit;
    }
    if (!overflow && (negative ? magnitude <= (uint64_t)INT64_MAX + 1 : magnitude <= (uint64_t)INT64_MAX)) {
        node->kind = K_INT;
        node->integer = negative ? (magnitude == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)magnitude)
                                 : (int64_t)magnitude;
    } else {
        node->kind = K_BIGINT;
    }
    return PARSED;
}

static int literal(const uint8_t *text, size_t len, size_t at, const char *word)
{
    size_t n = strlen(word);
    return at <= len && len - at >= n && memcmp(text + at, word, n) == 0;
}

/* Parse `text` at most `max_depth` deep (deeper is UNSURE). With `build`,
 * into nodes (node 0 the root) with decoded strings; else it only checks
 * the text, and `root` says what it holds. No recursion: open containers
 * are on a stack. */
static int parse(Parser *p, const uint8_t *text, size_t len, int max_depth, int build)
{
    size_t stack[DEPTH_LIMIT], last[DEPTH_LIMIT];
    uint8_t open[DEPTH_LIMIT];
    const uint8_t *key = NULL;
    size_t key_size = 0;
    uint8_t key_lone = 0;
    Node scratch;
    int depth = 0;
    size_t pos = 0;
    p->text = text;
    p->len = len;
    p->n_nodes = p->s_len = p->idx_len = 0;
    p->sorted = 0;
    p->decode = build;
    if (max_depth > DEPTH_LIMIT)
        max_depth = DEPTH_LIMIT;
    /* Reserved once: strings point into sbuf, which must not move while parsing. */
    if (build && grow((void **)&p->sbuf, &p->s_cap, len + 4, 1) < 0)
        return NO_MEMORY;
    while (pos < len && is_space(text[pos]))
        pos++;
    for (;;) {
        /* A value at pos: its node, linked to the open container. */
        if (pos >= len)
            return INVALID;
        uint8_t c = text[pos];
        uint8_t kind;
        if (c == '{')
            kind = K_OBJECT;
        else if (c == '[')
            kind = K_ARRAY;
        else if (c == '"')
            kind = K_STRING;
        else if (c == '-' || is_digit(c))
            kind = K_INT;
        else if (c == 't')
            kind = K_TRUE;
        else if (c == 'f')
            kind = K_FALSE;
        else if (c == 'n')
            kind = K_NULL;
        else
            return INVALID;
        if (depth == 0)
            p->root = kind;
        size_t at = 0;
        Node *node = &scratch;
        if (build) {
            at = new_node(p, kind);
            if (at == NONE)
                return NO_MEMORY;
            node = &p->nodes[at];
            if (depth > 0) {
                Node *parent = &p->nodes[stack[depth - 1]];
                if (last[depth - 1] == NONE)
                    parent->first = at;
                else
                    p->nodes[last[depth - 1]].next = at;
                last[depth - 1] = at;
                parent->count++;
                node->key = key;
                node->key_size = key_size;
            }
        }
        int result = PARSED;
        if (kind == K_OBJECT || kind == K_ARRAY) {
            if (depth >= max_depth)
                return UNSURE;
            stack[depth] = at;
            last[depth] = NONE;
            open[depth] = kind;
            depth++;
            pos++;
            while (pos < len && is_space(text[pos]))
                pos++;
            if (pos < len && text[pos] == (kind == K_OBJECT ? '}' : ']')) {
                pos++;
                depth--;
                goto after_value;
            }
            if (kind == K_ARRAY)
                continue;
            goto member;
        } else if (kind == K_STRING) {
            result = parse_string(p, &pos, &node->s, &node->size, &node->lone);
        } else if (kind == K_INT) {
            result = parse_number(p, &pos, node);
        } else {
            const char *word = kind == K_TRUE ? "true" : kind == K_FALSE ? "false" : "null";
            if (!literal(text, len, pos, word))
                return INVALID;
            pos += strlen(word);
        }
        if (result != PARSED)
            return result;
    after_value:
        while (pos < len && is_space(text[pos]))
            pos++;
        if (depth == 0)
            return pos == len ? PARSED : INVALID;
        if (pos >= len)
            return INVALID;
        if (text[pos] == (open[depth - 1] == K_OBJECT ? '}' : ']')) {
            pos++;
            depth--;
            goto after_value;
        }
        if (text[pos] != ',')
            return INVALID;
        pos++;
        while (pos < len && is_space(text[pos]))
            pos++;
        if (open[depth - 1] == K_ARRAY)
            continue;
    member:
        /* An object member: its key, a colon, then the value (next turn of the loop). */
        if (pos >= len || text[pos] != '"')
            return INVALID;
        result = parse_string(p, &pos, &key, &key_size, &key_lone);
        if (result != PARSED)
            return result;
        while (pos < len && is_space(text[pos]))
            pos++;
        if (pos >= len || text[pos] != ':')
            return INVALID;
        pos++;
        while (pos < len && is_space(text[pos]))
            pos++;
    }
}

/* ---------------------------------------------------------------- objects as sets of members */

static int key_compare(const Parser *p, size_t x, size_t y)
{
    const Node *a = &p->nodes[x], *b = &p->nodes[y];
    size_t la = a->key_size, lb = b->key_size;
    int order = la && lb ? memcmp(a->key, b->key, la < lb ? la : lb) : 0;
    if (order)
        return order;
    return la < lb ? -1 : la > lb;
}

/* Stable merge sort of `items` by key (bottom-up, no recursion). */
static void sort_members(const Parser *p, size_t *items, size_t *scratch, size_t n)
{
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t left = 0; left < n; left += 2 * width) {
            size_t mid = left + width < n ? left + width : n, right = left + 2 * width < n ? left + 2 * width : n;
            size_t i = left, j = mid, k = left;
            while (i < mid && j < right)
                scratch[k++] = key_compare(p, items[j], items[i]) < 0 ? items[j++] : items[i++];
            while (i < mid)
                scratch[k++] = items[i++];
            while (j < right)
                scratch[k++] = items[j++];
        }
        memcpy(items, scratch, n * sizeof(size_t));
    }
}

/* For every object: its members sorted by key, each key once, its last value kept (as a dict keeps it). */
static int build_member_sets(Parser *p)
{
    if (p->sorted)
        return 0;
    p->idx_len = 0;
    for (size_t at = 0; at < p->n_nodes; at++) {
        Node *node = &p->nodes[at];
        if (node->kind != K_OBJECT)
            continue;
        size_t n = node->count;
        if (grow((void **)&p->idx, &p->idx_cap, p->idx_len + n, sizeof(size_t)) < 0 ||
            grow((void **)&p->tmp, &p->tmp_cap, n ? n : 1, sizeof(size_t)) < 0)
            return -1;
        node = &p->nodes[at];
        size_t *items = p->idx + p->idx_len, k = 0;
        for (size_t child = node->first; child != NONE; child = p->nodes[child].next)
            items[k++] = child;
        sort_members(p, items, p->tmp, n);
        size_t unique = 0;
        for (size_t i = 0; i < n; i++) {
            if (i + 1 < n && key_compare(p, items[i], items[i + 1]) == 0)
                continue; /* a later member has this key */
            items[unique++] = items[i];
        }
        node->sorted = p->idx_len;
        node->unique = unique;
        p->idx_len += unique;
    }
    p->sorted = 1;
    return 0;
}

/* ---------------------------------------------------------------- numbers */

/* The float a number token reads as (float() of its text); 0 when C cannot say exactly. */
static int to_double(Parser *p, const Node *node, double *out)
{
#ifdef HAVE_STRTOD_L
    size_t n = node->b - node->a;
    if (grow((void **)&p->number, &p->number_cap, n + 1, 1) < 0)
        return 0;
    memcpy(p->number, p->text + node->a, n);
    p->number[n] = '\0';
    char *end;
    *out = strtod_l(p->number, &end, c_locale);
    return end == p->number + n;
#else
    (void)p;
    (void)node;
    (void)out;
    return 0;
#endif
}

static int is_number(uint8_t kind)
{
    return kind == K_INT || kind == K_BIGINT || kind == K_FLOAT;
}

/* Python's int == float, for an int64. */
static int int_equals_double(int64_t integer, double value)
{
    if (!(value >= -9223372036854775808.0 && value < 9223372036854775808.0) || value != floor(value))
        return 0;
    return (int64_t)value == integer;
}

static int numbers_equal(Parser *p, const Node *x, Parser *q, const Node *y)
{
    if (x->kind == K_INT && y->kind == K_INT)
        return x->integer == y->integer;
    if (x->kind == K_BIGINT && y->kind == K_BIGINT)
        return x->b - x->a == y->b - y->a && memcmp(p->text + x->a, q->text + y->a, x->b - x->a) == 0;
    if (x->kind != K_FLOAT && y->kind != K_FLOAT)
        return 0; /* an int64 and an integer beyond it */
    if (x->kind == K_FLOAT && y->kind == K_FLOAT && x->b - x->a == y->b - y->a &&
        memcmp(p->text + x->a, q->text + y->a, x->b - x->a) == 0)
        return 1;
    double dx, dy;
    if (x->kind == K_BIGINT || y->kind == K_BIGINT)
        return -1; /* an integer beyond 64 bits against a float: Python compares them exactly */
    if (x->kind == K_FLOAT && !to_double(p, x, &dx))
        return -1;
    if (y->kind == K_FLOAT && !to_double(q, y, &dy))
        return -1;
    if (x->kind == K_INT)
        return int_equals_double(x->integer, dy);
    if (y->kind == K_INT)
        return int_equals_double(y->integer, dx);
    return dx == dy;
}

/* ---------------------------------------------------------------- equality */

/* canonical_json(x) == canonical_json(y): 1, 0, or -1 (unsure). Recurses
 * once per level of nesting, which parse() bounded. */
static int values_equal(Parser *p, size_t xi, Parser *q, size_t yi)
{
    const Node *x = &p->nodes[xi], *y = &q->nodes[yi];
    if (is_number(x->kind) && is_number(y->kind))
        return numbers_equal(p, x, q, y);
    if (x->kind != y->kind)
        return 0;
    int result = 1;
    switch (x->kind) {
    case K_STRING:
        return x->size == y->size && (!x->size || memcmp(x->s, y->s, x->size) == 0);
    case K_ARRAY: {
        if (x->count != y->count)
            return 0;
        for (size_t i = x->first, j = y->first; i != NONE && j != NONE; i = p->nodes[i].next, j = q->nodes[j].next) {
            int equal = values_equal(p, i, q, j);
            if (equal == 0)
                return 0;
            if (equal < 0)
                result = -1;
        }
        return result;
    }
    case K_OBJECT: {
        if (x->unique != y->unique)
            return 0;
        for (size_t k = 0; k < x->unique; k++) {
            const Node *mx = &p->nodes[p->idx[x->sorted + k]], *my = &q->nodes[q->idx[y->sorted + k]];
            if (mx->key_size != my->key_size || (mx->key_size && memcmp(mx->key, my->key, mx->key_size) != 0))
                return 0;
        }
        for (size_t k = 0; k < x->unique; k++) {
            int equal = values_equal(p, p->idx[x->sorted + k], q, q->idx[y->sorted + k]);
            if (equal == 0)
                return 0;
            if (equal < 0)
                result = -1;
        }
        return result;
    }
    default: /* null, true, false */
        return 1;
    }
}

/* ---------------------------------------------------------------- json_depth */

/* litmus_score.scoring.rules.json_depth on bytes: brackets outside string literals. */
static int64_t json_depth(const uint8_t *s, size_t n)
{
    int64_t depth = 0, deepest = 0;
    int in_string = 0;
    size_t skip = 0; /* a byte before this one was escaped */
    for (size_t block = 0; block < n; block += 16) {
        /* Which of the block's 16 bytes json_depth looks at: a quote, a backslash, a bracket. */
        uint8_t tail[16] = {0};
        const uint8_t *bytes = s + block;
        if (n - block < 16) {
            memcpy(tail, bytes, n - block);
            bytes = tail;
        }
        unsigned special = 0;
#ifdef FAST_SCAN
        __m128i x = _mm_loadu_si128((const __m128i *)bytes);
        /* "[" and "{", "]" and "}" differ in the 0x20 bit only, which no other byte pair shares. */
        __m128i folded = _mm_or_si128(x, _mm_set1_epi8(0x20));
        special = (unsigned)_mm_movemask_epi8(
            _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')), _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'))),
                         _mm_or_si128(_mm_cmpeq_epi8(folded, _mm_set1_epi8('{')),
                                      _mm_cmpeq_epi8(folded, _mm_set1_epi8('}')))));
#else
        for (unsigned k = 0; k < 16; k++) {
            uint8_t folded = bytes[k] | 0x20;
            special |= (unsigned)(bytes[k] == '"' || bytes[k] == '\\' || folded == '{' || folded == '}') << k;
        }
#endif
        for (; special; special &= special - 1) {
            size_t at = block + (size_t)ctz16(special);
            if (at < skip)
                continue;
            uint8_t c = s[at];
            if (in_string) {
                if (c == '\\')
                    skip = at + 2; /* the escaped character, whatever it is */
                else if (c == '"')
                    in_string = 0;
            } else if (c == '"') {
                in_string = 1;
            } else if (c == '[' || c == '{') {
                if (++depth > deepest)
                    deepest = depth;
            } else if (c == ']' || c == '}') {
                if (depth > 0)
                    depth--;
            }
        }
    }
    return deepest;
}

/* How many `[` and `{` bytes s holds: json_depth is at most that. */
static size_t openings(const uint8_t *s, size_t n)
{
    size_t count = 0, i = 0;
#ifdef FAST_SCAN
    /* Counted in byte lanes (a match is -1: subtracting it adds one), summed before a lane can
     * overflow: without -mpopcnt, __builtin_popcount is a library call per 16 bytes. */
    const __m128i case_bit = _mm_set1_epi8(0x20), opening = _mm_set1_epi8('{'), zero = _mm_setzero_si128();
    while (i + 16 <= n) {
        __m128i lanes = zero;
        for (size_t blocks = 0; blocks < 255 && i + 16 <= n; blocks++, i += 16) {
            __m128i x = _mm_or_si128(_mm_loadu_si128((const __m128i *)(s + i)), case_bit);
            lanes = _mm_sub_epi8(lanes, _mm_cmpeq_epi8(x, opening));
        }
        __m128i sums = _mm_sad_epu8(lanes, zero);
        count += (size_t)_mm_cvtsi128_si32(sums) + (size_t)_mm_cvtsi128_si32(_mm_srli_si128(sums, 8));
    }
#endif
    for (; i < n; i++)
        count += (s[i] | 0x20) == '{';
    return count;
}

/* ---------------------------------------------------------------- module functions */

#define COLUMN_ARGS "OOnnp"

/* The rows to read (int64) as `rows`, their count as `n`: 0, or -1 with an exception set. */
static int rows_get(PyObject *object, Py_buffer *rows, size_t *n)
{
    if (PyObject_GetBuffer(object, rows, PyBUF_SIMPLE) < 0)
        return -1;
    if (rows->len % 8) {
        PyErr_SetString(PyExc_ValueError, "rows must be int64");
        PyBuffer_Release(rows);
        return -1;
    }
    *n = (size_t)rows->len / 8;
    return 0;
}

/* The rows and a writable output of one byte per row, as too_deep, objects and same take them. */
static int rows_and_out_get(PyObject *rows_object, PyObject *out_object, Py_buffer *rows, Py_buffer *out, size_t *n)
{
    if (rows_get(rows_object, rows, n) < 0)
        return -1;
    if (get_sized(out_object, out, 1, *n, 1, "out") < 0) {
        PyBuffer_Release(rows);
        return -1;
    }
    return 0;
}

static PyObject *bad_row(void)
{
    PyErr_SetString(PyExc_IndexError, "a row or its offsets lie outside the array");
    return NULL;
}

PyDoc_STRVAR(too_deep_doc, "too_deep(offsets, data, offset, length, wide, rows, max_depth, out): per row (uint8) "
                           "1 where json_depth of the text is above max_depth, else 0.");

static PyObject *too_deep(PyObject *self, PyObject *args)
{
    PyObject *offsets, *data, *rows_object, *out_object, *result = NULL;
    Py_ssize_t offset, length;
    long long max_depth;
    int wide, failed = 0;
    if (!PyArg_ParseTuple(args, COLUMN_ARGS "OLO", &offsets, &data, &offset, &length, &wide, &rows_object, &max_depth,
                          &out_object))
        return NULL;
    Column column;
    Py_buffer rows, out;
    size_t n;
    if (column_get(&column, offsets, data, offset, length, wide) < 0)
        return NULL;
    if (rows_and_out_get(rows_object, out_object, &rows, &out, &n) < 0) {
        column_release(&column);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    const int64_t *row = rows.buf;
    uint8_t *deep = out.buf;
    for (size_t k = 0; k < n; k++) {
        const uint8_t *text;
        size_t len;
        int64_t at;
        memcpy(&at, &row[k], 8);
        if (column_text(&column, at, &text, &len) < 0) {
            failed = 1;
            break;
        }
        /* Most texts hold fewer brackets than the bound: counting them settles it. */
        deep[k] = max_depth < 0 || ((long long)openings(text, len) > max_depth && json_depth(text, len) > max_depth);
    }
    Py_END_ALLOW_THREADS
    result = failed ? bad_row() : (Py_INCREF(Py_None), Py_None);
    PyBuffer_Release(&out);
    PyBuffer_Release(&rows);
    column_release(&column);
    return result;
}

PyDoc_STRVAR(objects_doc, "objects(offsets, data, offset, length, wide, rows, max_depth, out): per row (int8) 1 where "
                          "the text is a JSON object, 0 where it is not, 2 where Python must say.");

static PyObject *objects(PyObject *self, PyObject *args)
{
    PyObject *offsets, *data, *rows_object, *out_object, *result = NULL;
    Py_ssize_t offset, length;
    int wide, max_depth, failed = 0;
    if (!PyArg_ParseTuple(args, COLUMN_ARGS "OiO", &offsets, &data, &offset, &length, &wide, &rows_object, &max_depth,
                          &out_object))
        return NULL;
    Column column;
    Py_buffer rows, out;
    size_t n;
    if (column_get(&column, offsets, data, offset, length, wide) < 0)
        return NULL;
    if (rows_and_out_get(rows_object, out_object, &rows, &out, &n) < 0) {
        column_release(&column);
        return NULL;
    }
    Parser parser;
    memset(&parser, 0, sizeof(parser));
    Py_BEGIN_ALLOW_THREADS
    const int64_t *row = rows.buf;
    int8_t *status = out.buf;
    for (size_t k = 0; k < n; k++) {
        const uint8_t *text;
        size_t len;
        int64_t at;
        memcpy(&at, &row[k], 8);
        if (column_text(&column, at, &text, &len) < 0) {
            failed = 1;
            break;
        }
        int parsed = parse(&parser, text, len, max_depth, 0);
        if (parsed == NO_MEMORY) {
            failed = 2;
            break;
        }
        status[k] = parsed == UNSURE ? STATUS_UNSURE : parsed == PARSED && parser.root == K_OBJECT ? STATUS_YES : STATUS_NO;
    }
    Py_END_ALLOW_THREADS
    parser_free(&parser);
    result = failed == 1 ? bad_row() : failed == 2 ? PyErr_NoMemory() : (Py_INCREF(Py_None), Py_None);
    PyBuffer_Release(&out);
    PyBuffer_Release(&rows);
    column_release(&column);
    return result;
}

PyDoc_STRVAR(same_doc, "same(left column..., right column..., rows, max_depth, out): per row (int8) 1 where both "
                       "texts are JSON objects of the same value, 0 where they are not, 2 where Python must say.");

static PyObject *same(PyObject *self, PyObject *args)
{
    PyObject *l_offsets, *l_data, *r_offsets, *r_data, *rows_object, *out_object, *result = NULL;
    Py_ssize_t l_offset, l_length, r_offset, r_length;
    int l_wide, r_wide, max_depth, failed = 0;
    if (!PyArg_ParseTuple(args, COLUMN_ARGS COLUMN_ARGS "OiO", &l_offsets, &l_data, &l_offset, &l_length, &l_wide,
                          &r_offsets, &r_data, &r_offset, &r_length, &r_wide, &rows_object, &max_depth, &out_object))
        return NULL;
    Column left, right;
    Py_buffer rows, out;
    size_t n;
    if (column_get(&left, l_offsets, l_data, l_offset, l_length, l_wide) < 0)
        return NULL;
    if (column_get(&right, r_offsets, r_data, r_offset, r_length, r_wide) < 0) {
        column_release(&left);
        return NULL;
    }
    if (rows_and_out_get(rows_object, out_object, &rows, &out, &n) < 0) {
        column_release(&left);
        column_release(&right);
        return NULL;
    }
    Parser p, q;
    memset(&p, 0, sizeof(p));
    memset(&q, 0, sizeof(q));
    Py_BEGIN_ALLOW_THREADS
    const int64_t *row = rows.buf;
    int8_t *status = out.buf;
    for (size_t k = 0; k < n; k++) {
        const uint8_t *lt, *rt;
        size_t ll, rl;
        int64_t at;
        memcpy(&at, &row[k], 8);
        if (column_text(&left, at, &lt, &ll) < 0 || column_text(&right, at, &rt, &rl) < 0) {
            failed = 1;
            break;
        }
        int a = parse(&p, lt, ll, max_depth, 1);
        int b = a == PARSED ? parse(&q, rt, rl, max_depth, 1) : a;
        if (a == NO_MEMORY || b == NO_MEMORY) {
            failed = 2;
            break;
        }
        if (a != PARSED || b != PARSED || p.nodes[0].kind != K_OBJECT || q.nodes[0].kind != K_OBJECT) {
            status[k] = STATUS_UNSURE; /* not two objects: not this routine's to say */
            continue;
        }
        if (build_member_sets(&p) < 0 || build_member_sets(&q) < 0) {
            failed = 2;
            break;
        }
        int equal = values_equal(&p, 0, &q, 0);
        status[k] = equal < 0 ? STATUS_UNSURE : equal ? STATUS_YES : STATUS_NO;
    }
    Py_END_ALLOW_THREADS
    parser_free(&p);
    parser_free(&q);
    result = failed == 1 ? bad_row() : failed == 2 ? PyErr_NoMemory() : (Py_INCREF(Py_None), Py_None);
    PyBuffer_Release(&out);
    PyBuffer_Release(&rows);
    column_release(&left);
    column_release(&right);
    return result;
}

/* ---------------------------------------------------------------- extract */

typedef struct {
    const char **keys;
    Py_ssize_t *lengths;
    Py_ssize_t count;
} Path;

/* The node at `path` below the root (the last member of each key, as a dict keeps it), or NONE. */
static size_t resolve(const Parser *p, const Path *path)
{
    size_t at = 0;
    for (Py_ssize_t k = 0; k < path->count; k++) {
        const Node *node = &p->nodes[at];
        if (node->kind != K_OBJECT)
            return NONE;
        size_t found = NONE, want = (size_t)path->lengths[k];
        for (size_t child = node->first; child != NONE; child = p->nodes[child].next) {
            const Node *member = &p->nodes[child];
            if (member->key_size == want && (!want || memcmp(member->key, path->keys[k], want) == 0))
                found = child;
        }
        if (found == NONE)
            return NONE;
        at = found;
    }
    return at;
}

PyDoc_STRVAR(extract_doc,
             "extract(offsets, data, offset, length, wide, rows, paths, want, max_depth, kinds, numbers, truth, "
             "inexact, string_offsets) -> the strings' bytes.\n\n"
             "For each path (a tuple of UTF-8 keys) and row where want[path * n + row]: the value's kind (codes of "
             "transforms.jsontext), its number (float64, NaN for no number), its truth, its string (decoded; "
             "string_offsets holds n + 1 int32 per path into the bytes returned), and inexact where Python must read "
             "the value (an integer beyond 2**53, a string with a lone surrogate, a text C could not read).");

typedef struct {
    size_t n, n_paths;
    const Path *paths;
    const int64_t *rows;
    const uint8_t *want;
    int8_t *kinds;
    char *numbers; /* float64, unaligned-safe */
    uint8_t *truth, *inexact;
    int max_depth;
    /* Strings in the order found; spans[2 * cell] their start, spans[2 * cell + 1] their size. */
    uint8_t *spool;
    size_t spooled, spool_cap;
    size_t *spans;
} Extraction;

static void put_number(Extraction *e, size_t cell, double value)
{
    memcpy(e->numbers + cell * 8, &value, 8);
}

/* The columns of one value found at a path. */
static int put_value(Extraction *e, Parser *parser, const Node *node, size_t cell)
{
    double value;
    switch (node->kind) {
    case K_NULL:
        e->kinds[cell] = V_NULL;
        break;
    case K_TRUE:
    case K_FALSE:
        e->kinds[cell] = V_BOOL;
        e->truth[cell] = node->kind == K_TRUE;
        break;
    case K_INT:
        e->kinds[cell] = V_NUMBER;
        /* float64 holds integers up to 2**53 exactly. */
        if (node->integer >= -9007199254740992LL && node->integer <= 9007199254740992LL)
            put_number(e, cell, (double)node->integer);
        else
            e->inexact[cell] = 1;
        break;
    case K_BIGINT:
        e->kinds[cell] = V_NUMBER;
        e->inexact[cell] = 1;
        break;
    case K_FLOAT:
        e->kinds[cell] = V_NUMBER;
        if (to_double(parser, node, &value))
            put_number(e, cell, value);
        else
            e->inexact[cell] = 1;
        break;
    case K_STRING:
        e->kinds[cell] = V_STRING;
        if (node->lone) {
            e->inexact[cell] = 1;
            break;
        }
        if (grow((void **)&e->spool, &e->spool_cap, e->spooled + node->size, 1) < 0)
            return NO_MEMORY;
        if (node->size)
            memcpy(e->spool + e->spooled, node->s, node->size);
        e->spans[2 * cell] = e->spooled;
        e->spans[2 * cell + 1] = node->size;
        e->spooled += node->size;
        break;
    case K_ARRAY:
        e->kinds[cell] = V_LIST;
        break;
    default:
        e->kinds[cell] = V_OBJECT;
    }
    return PARSED;
}

/* Without the GIL: every row parsed once, every wanted path resolved in it.
 * 0, or 1 (a bad row), 2 (no memory). */
static int run_extraction(Extraction *e, const Column *column)
{
    size_t n = e->n, cells = n * e->n_paths;
    int failed = 0;
    Parser parser;
    memset(&parser, 0, sizeof(parser));
    memset(e->kinds, V_ABSENT, cells);
    memset(e->truth, 0, cells);
    memset(e->inexact, 0, cells);
    for (size_t cell = 0; cell < cells; cell++)
        put_number(e, cell, NAN);
    for (size_t k = 0; k < n && !failed; k++) {
        int needed = 0;
        for (size_t i = 0; i < e->n_paths; i++)
            needed |= e->want[i * n + k];
        if (!needed)
            continue;
        const uint8_t *text;
        size_t len;
        int64_t at;
        memcpy(&at, &e->rows[k], 8);
        if (column_text(column, at, &text, &len) < 0) {
            failed = 1;
            break;
        }
        int parsed = parse(&parser, text, len, e->max_depth, 1);
        if (parsed == NO_MEMORY) {
            failed = 2;
            break;
        }
        for (size_t i = 0; i < e->n_paths && !failed; i++) {
            size_t cell = i * n + k;
            if (!e->want[cell])
                continue;
            if (parsed != PARSED || parser.nodes[0].kind != K_OBJECT) {
                e->inexact[cell] = 1;
                continue;
            }
            size_t found = resolve(&parser, &e->paths[i]);
            if (found != NONE && put_value(e, &parser, &parser.nodes[found], cell) != PARSED)
                failed = 2;
        }
    }
    parser_free(&parser);
    return failed;
}

/* The spooled strings laid out path by path, and each path's offsets into them. */
static PyObject *strings_by_path(const Extraction *e, char *string_offsets)
{
    if (e->spooled > INT32_MAX)
        return PyErr_Format(PyExc_OverflowError, "%zu bytes of strings do not fit int32 offsets", e->spooled);
    PyObject *bytes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)e->spooled);
    if (!bytes)
        return NULL;
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(bytes);
    size_t used = 0, n = e->n;
    for (size_t i = 0; i < e->n_paths; i++) {
        for (size_t k = 0; k <= n; k++) {
            int32_t mark = (int32_t)used;
            memcpy(string_offsets + (i * (n + 1) + k) * 4, &mark, 4);
            if (k == n)
                break;
            size_t cell = i * n + k, size = e->spans[2 * cell + 1];
            if (size) {
                memcpy(out + used, e->spool + e->spans[2 * cell], size);
                used += size;
            }
        }
    }
    return bytes;
}

static void release_all(Py_buffer *views, int count)
{
    for (int i = 0; i < count; i++)
        PyBuffer_Release(&views[i]);
}

static PyObject *extract(PyObject *self, PyObject *args)
{
    PyObject *offsets, *data, *rows_object, *paths_object, *want_object, *result = NULL;
    PyObject *kinds_object, *numbers_object, *truth_object, *inexact_object, *soffsets_object;
    Py_ssize_t offset, length;
    int wide, max_depth;
    if (!PyArg_ParseTuple(args, COLUMN_ARGS "OO!OiOOOOO", &offsets, &data, &offset, &length, &wide, &rows_object,
                          &PyTuple_Type, &paths_object, &want_object, &max_depth, &kinds_object, &numbers_object,
                          &truth_object, &inexact_object, &soffsets_object))
        return NULL;
    Py_ssize_t n_paths = PyTuple_GET_SIZE(paths_object);
    Path *paths = PyMem_Calloc(n_paths ? (size_t)n_paths : 1, sizeof(Path));
    Column column;
    Py_buffer views[7]; /* rows, want, kinds, numbers, truth, inexact, string_offsets */
    int held = 0;
    if (!paths)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n_paths; i++) {
        PyObject *keys = PyTuple_GET_ITEM(paths_object, i);
        if (!PyTuple_Check(keys) || PyTuple_GET_SIZE(keys) == 0) {
            PyErr_SetString(PyExc_TypeError, "a path must be a non-empty tuple of bytes");
            goto free_paths;
        }
        paths[i].count = PyTuple_GET_SIZE(keys);
        paths[i].keys = PyMem_Calloc((size_t)paths[i].count, sizeof(char *));
        paths[i].lengths = PyMem_Calloc((size_t)paths[i].count, sizeof(Py_ssize_t));
        if (!paths[i].keys || !paths[i].lengths) {
            PyErr_NoMemory();
            goto free_paths;
        }
        for (Py_ssize_t k = 0; k < paths[i].count; k++) {
            /* `paths_object`, held by the caller for the whole call, keeps each bytes object alive. */
            char *key;
            if (PyBytes_AsStringAndSize(PyTuple_GET_ITEM(keys, k), &key, &paths[i].lengths[k]) < 0)
                goto free_paths;
            paths[i].keys[k] = key;
        }
    }
    if (column_get(&column, offsets, data, offset, length, wide) < 0)
        goto free_paths;
    size_t n;
    if (rows_get(rows_object, &views[0], &n) < 0)
        goto release_column;
    held = 1;
    size_t cells = n * (size_t)n_paths;
    struct {
        PyObject *object;
        size_t itemsize, count;
        int writable;
        const char *name;
    } outputs[6] = {
        {want_object, 1, cells, 0, "want"},       {kinds_object, 1, cells, 1, "kinds"},
        {numbers_object, 8, cells, 1, "numbers"}, {truth_object, 1, cells, 1, "truth"},
        {inexact_object, 1, cells, 1, "inexact"}, {soffsets_object, 4, (n + 1) * (size_t)n_paths, 1, "string_offsets"},
    };
    for (int i = 0; i < 6; i++) {
        if (get_sized(outputs[i].object, &views[held], outputs[i].itemsize, outputs[i].count, outputs[i].writable,
                      outputs[i].name) < 0)
            goto release;
        held++;
    }
    Extraction e = {
        .n = n, .n_paths = (size_t)n_paths, .paths = paths, .rows = views[0].buf, .want = views[1].buf,
        .kinds = views[2].buf, .numbers = views[3].buf, .truth = views[4].buf, .inexact = views[5].buf,
        .max_depth = max_depth, .spans = calloc(cells ? 2 * cells : 1, sizeof(size_t)),
    };
    int failed = e.spans ? 0 : 2;
    if (!failed) {
        Py_BEGIN_ALLOW_THREADS
        failed = run_extraction(&e, &column);
        Py_END_ALLOW_THREADS
    }
    if (failed == 1)
        bad_row();
    else if (failed == 2)
        PyErr_NoMemory();
    else
        result = strings_by_path(&e, views[6].buf);
    free(e.spool);
    free(e.spans);
release:
    release_all(views, held);
release_column:
    column_release(&column);
free_paths:
    for (Py_ssize_t i = 0; i < n_paths; i++) {
        PyMem_Free(paths[i].keys);
        PyMem_Free(paths[i].lengths);
    }
    PyMem_Free(paths);
    return result;
}

static PyMethodDef methods[] = {
    {"too_deep", too_deep, METH_VARARGS, too_deep_doc},
    {"objects", objects, METH_VARARGS, objects_doc},
    {"same", same, METH_VARARGS, same_doc},
    {"extract", extract, METH_VARARGS, extract_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "transforms._native",
    .m_doc = "JSON texts of Arrow string columns, read from their buffers without the GIL (transforms/jsontext.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__native(void)
{
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
#ifdef HAVE_STRTOD_L
    c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    if (!c_locale) {
        Py_DECREF(m);
        return PyErr_NoMemory();
    }
#endif
    if (PyModule_AddIntConstant(m, "DEPTH_LIMIT", DEPTH_LIMIT) < 0 ||
        PyModule_AddIntConstant(m, "EXACT_FLOATS", EXACT_FLOATS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
