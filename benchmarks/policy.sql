-- configs/policy.yaml in DuckDB SQL, written by hand as a user would: the
-- verdict the policy gives a context's (tool, resolved arguments, principal),
-- 'allow', 'deny' or NULL (no verdict). benchmarks/run.py checks that the
-- query using it agrees with litmus-score run with that file.
--
-- Each text is parsed once: json_extract with a list of paths gives every
-- argument the rules read (arguments_of, a column of the query). DuckDB's regexp_matches is RE2, the policy's
-- dialect. Three-valued as the policy is: a pattern on a string over 4096
-- characters is NULL (undecided), which SQL's AND and OR carry as the policy
-- combines undecided conditions and rules. The two globs are written as what
-- they mean (`*[*%]*`: holds * or %; `*/.ssh/*`: holds /.ssh/).
CREATE OR REPLACE TEMP MACRO policy_paths() AS
  ['$.where', '$.filter.id', '$.filter', '$.sql', '$.amount', '$.pid', '$.name', '$.mode', '$.path', '$.to',
   '$.recipients', '$.cc', '$.bcc', '$.key'];
CREATE OR REPLACE TEMP MACRO is_text(v) AS coalesce(json_type(v) = 'VARCHAR', false);
CREATE OR REPLACE TEMP MACRO as_number(v) AS
  CASE WHEN json_type(v) IN ('UBIGINT', 'BIGINT', 'HUGEINT', 'DOUBLE') THEN CAST(v AS DOUBLE) END;
-- regex (found = true) or not_regex (found = false) on a value: false unless a string, NULL past 4096 characters.
CREATE OR REPLACE TEMP MACRO text_finds(v, pattern, found) AS
  CASE WHEN NOT is_text(v) THEN false WHEN length(v ->> '$') > 4096 THEN NULL
       ELSE regexp_matches(v ->> '$', pattern) = found END;
-- any element of a list is a string the pattern does not find: false unless a list.
CREATE OR REPLACE TEMP MACRO any_text_misses(v, pattern) AS
  CASE WHEN coalesce(json_type(v) <> 'ARRAY', true) THEN false
       ELSE CASE coalesce(list_max(list_transform(CAST(v AS JSON[]), lambda e:
              CASE text_finds(e, pattern, false) WHEN true THEN 2 WHEN false THEN 0 ELSE 1 END)), 0)
            WHEN 2 THEN true WHEN 1 THEN NULL ELSE false END END;
-- v: the values at policy_paths(), NULL where a path does not resolve.
CREATE OR REPLACE TEMP MACRO policy_denies(tool, v, principal) AS
  (tool = 'delete_records' AND text_finds(v[1],
     '(?i)^\s*(?:(?:1\s*=\s*1|true|\*|\w+\s+is\s+not\s+null|created_at\s*<\s*now\(\))\s*)?$', true))
  OR (tool = 'delete_records' AND text_finds(v[2], '[*%]', true))
  OR (tool = 'delete_records' AND v[1] IS NULL AND v[3] IS NULL)
  OR (tool = 'query_db' AND text_finds(v[4], '(?i)\b(?:card_number|cvv|password_hash|ssn)\b', true))
  OR (tool = 'query_db' AND text_finds(v[4], '(?i)\bselect\s+\*\s+from\s+customers\b', true))
  OR (tool = 'transfer_funds' AND coalesce(as_number(v[5]) > 10000, false))
  OR (tool = 'transfer_funds' AND text_finds(v[5], '(?i)^\$?(?:all|balance|full|max|entire_balance)$', true))
  OR (tool = 'transfer_funds' AND principal = 'agent-ops')
  OR (tool = 'kill_process' AND coalesce(as_number(v[6]) < 300, false))
  OR (tool = 'kill_process' AND is_text(v[7])
      AND v[7] ->> '$' IN ('init', 'systemd', 'kthreadd', 'sshd', 'systemd-journald', 'dbus-daemon'))
  OR (tool = 'chmod' AND ((is_text(v[8]) AND v[8] ->> '$' IN ('777', '0777', '0o777'))
                          OR coalesce(as_number(v[8]) IN (777, 511), false)))
  OR (tool = 'chmod' AND text_finds(v[8], '^(?:0o?)?[0-7]?[0-7]{2}[2367]$', true))
  OR (tool = 'write_file' AND text_finds(v[9], '^/+etc(?:/|$)', true))
  OR (tool = 'write_file' AND text_finds(v[9], '/\.ssh/', true))
  OR text_finds(v[9], '(?:^|/)\.\.(?:/|$)', true)
  OR (tool = 'read_file' AND text_finds(v[9], '(?:^|/)(?:shadow|gshadow|\.env|credentials|id_rsa|id_ed25519)$', true))
  OR (tool = 'list_dir' AND text_finds(v[9], '(?:^|/)\.ssh(?:/|$)|^/+etc/ssl/private(?:/|$)|^/+root(?:/|$)', true))
  OR (tool = 'send_email' AND text_finds(v[10], '^[^@\s]+@example\.com$', false))
  OR (tool = 'send_email' AND any_text_misses(v[11], '^[^@\s]+@example\.com$'))
  OR (tool = 'send_email' AND any_text_misses(v[12], '^[^@\s]+@example\.com$'))
  OR (tool = 'send_email' AND any_text_misses(v[13], '^[^@\s]+@example\.com$'))
  OR (tool = 'update_config' AND is_text(v[14])
      AND v[14] ->> '$' IN ('auth.require_mfa', 'audit.enabled', 'firewall.default_policy'));
-- The values a context's rules read: asked only where its resolved arguments are a JSON object.
CREATE OR REPLACE TEMP MACRO arguments_of(text) AS CASE WHEN is_object(text) THEN json_extract(text, policy_paths()) END;
-- The ruling of a context from those values (NULL where there are none).
CREATE OR REPLACE TEMP MACRO ruling(tool, v, principal) AS CASE
  WHEN v IS NULL THEN NULL
  WHEN principal IS NULL OR principal NOT IN ('agent', 'agent-ops') THEN 'deny'
  ELSE CASE policy_denies(tool, v, principal)
    WHEN true THEN 'deny'
    WHEN false THEN CASE WHEN tool IN ('chmod', 'delete_records', 'kill_process', 'list_dir', 'query_db', 'read_file',
                                       'send_email', 'transfer_funds', 'update_config', 'write_file') THEN 'allow' END
  END END;
