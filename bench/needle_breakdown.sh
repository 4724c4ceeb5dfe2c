#!/usr/bin/env bash
# bench/needle_breakdown.sh LONGHAUL DB [PER_STAGE]: where a needle policy
# fails, stage by stage, from a run's own episodes (its replay store DB).
#
# A needle episode takes three copies: the question's id into search(...),
# the line number search gives into read(...), and the asked field's value
# from the line read into the answer. For the last PER_STAGE (200) ended
# episodes of each stage of the run (an episode's stage: that of its
# oldest policy version), `longhaul replay show` gives the transcript, and
# each episode is put at its first wrong move:
#   id:     its first search(...) is not the question's id;
#   line:   the search was right, its first read(...) is not the line the
#           search gave;
#   answer: it read the right line and answered something else (the field
#           not asked, or a value not on the line);
#   other:  no search or no read (a malformed call, or out of steps).
# The counts are split by the digits of the record's line number (a
# document of 48 lines has 2, of 3,072 lines 4, of 12,288 lines 4 or 5).
set -euo pipefail
bin=$1 db=$2 per=${3:-200}
[ -f "$db" ] || { echo "needle_breakdown: no store $db" >&2; exit 2; }
ids=$(sqlite3 -readonly -separator ' ' "$db" "
  SELECT stage, id FROM (
    SELECT p.stage_index AS stage, e.id AS id,
           row_number() OVER (PARTITION BY p.stage_index ORDER BY e.id DESC) AS k
    FROM episodes e JOIN policy_versions p ON p.version = e.min_version
    WHERE e.env = 'needle' AND e.status IN ('complete', 'truncated'))
  WHERE k <= $per ORDER BY stage, id")
[ -n "$ids" ] || { echo "needle_breakdown: no ended needle episode with a policy version in $db" >&2; exit 1; }
while read -r stage id; do
  "$bin" replay show --db "$db" "$id" | awk -v stage="$stage" '
    /Question: what is the / { match($0, /id ID-[A-Z0-9]+\?/); qid = substr($0, RSTART + 3, RLENGTH - 4) }
    /^  env    L[0-9]+ id=ID-/ { match($0, /L[0-9]+/); n = substr($0, RSTART + 1, RLENGTH - 1)
                                 match($0, / id=ID-[A-Z0-9]+/); at[substr($0, RSTART + 4, RLENGTH - 4)] = n }
    /^  policy \[call\] search\(/ && !searched { searched = 1; s = $0; sub(/.*search\(/, "", s); sub(/\).*/, "", s); term = s }
    /^  env    \[obs\] lines: / && !hit { s = $0; sub(/.*lines: /, "", s); split(s, w, " "); hit = w[1] }
    /^  policy \[call\] read\(/ && !readn { s = $0; sub(/.*read\(/, "", s); sub(/\).*/, "", s); readn = s }
    /^outcome: / { outcome = $2 }
    END {
      line = (term == qid && hit ~ /^[0-9]+$/) ? hit : at[qid]
      digits = line ~ /^[0-9]+$/ ? length(line) : "?"
      if (outcome == "success") what = "success"
      else if (!searched || qid == "") what = "other"
      else if (term != qid) what = "id"
      else if (readn == "") what = "other"
      else if (readn != hit) what = "line"
      else what = "answer"
      print stage, digits, what
    }'
done <<< "$ids" | awk '
  { c[$1 " " $2 " " $3]++; d[$1 " " $2]++; if ($1 > last) last = $1 }
  END {
    printf "stage  digits  episodes  success  wrong id  wrong line  wrong answer  other\n"
    split("1 2 3 4 5 6 7 ?", digits, " ")
    for (s = 0; s <= last; s++) for (i = 1; i <= 8; i++) if (d[s " " digits[i]]) {
      k = s " " digits[i]
      printf "%5d  %6s  %8d  %7d  %8d  %10d  %12d  %5d\n", s, digits[i], d[k], c[k " success"], c[k " id"], c[k " line"],
             c[k " answer"], c[k " other"]
    }
  }'
