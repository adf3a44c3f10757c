-- No policy: only recorded verdicts count.
CREATE OR REPLACE TEMP MACRO arguments_of(text) AS CAST(NULL AS JSON[]);
CREATE OR REPLACE TEMP MACRO ruling(tool, v, principal) AS CAST(NULL AS VARCHAR);
