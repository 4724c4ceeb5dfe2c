/* learner: admission of complete episodes by staleness and outcome. */
#include "learner/internal.h"

lh_learner_admission lh_learner_admission_check(uint64_t learner_version, uint64_t oldest_version,
                                Longhaul__Outcome outcome, uint64_t max_policy_lag,
                                lh_learner_admission_counts *counts) {
  lh_learner_admission a;
  if (outcome != LONGHAUL__OUTCOME__OUTCOME_SUCCESS && outcome != LONGHAUL__OUTCOME__OUTCOME_FAILURE &&
      outcome != LONGHAUL__OUTCOME__OUTCOME_TRUNCATED)
    a = LH_LEARNER_DROP_STATUS;
  else if (oldest_version <= learner_version && learner_version - oldest_version > max_policy_lag)
    a = LH_LEARNER_DROP_STALE;
  else
    a = LH_LEARNER_ADMIT;
  if (counts) {
    switch (a) {
      case LH_LEARNER_ADMIT: {
        counts->admitted++;
        if (oldest_version > learner_version) counts->admitted_future++;
        uint64_t staleness = oldest_version > learner_version ? 0 : learner_version - oldest_version;
        if (staleness > counts->max_admitted_staleness) counts->max_admitted_staleness = staleness;
        break;
      }
      case LH_LEARNER_DROP_STALE: counts->dropped_stale++; break;
      case LH_LEARNER_DROP_STATUS: counts->dropped_status++; break;
    }
  }
  return a;
}

const char *lh_learner_admission_name(lh_learner_admission a) {
  switch (a) {
    case LH_LEARNER_ADMIT: return "admit";
    case LH_LEARNER_DROP_STALE: return "stale";
    case LH_LEARNER_DROP_STATUS: return "status";
  }
  return "unknown";
}
