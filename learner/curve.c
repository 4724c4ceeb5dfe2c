/* learner: CURVE for the learner's three sockets, and the ZAP handler of
 * its ZeroMQ context. With [learner] curve_secret_key_file and
 * curve_allowed_keys set, the learner's key is read, the handler starts
 * with the allow-list of actor keys, and the sockets bound after it are
 * CURVE servers that admit only those keys. Either way the handler caps
 * the ingest ROUTER's connections (ingest_queue_bytes). */
#include <string.h>

#include "learner/internal.h"

int lh_learner_curve_start(void *zmq_ctx, const lh_learner_config *cfg, lh_zsock_curve *curve, lh_zsock_zap **zap,
                           lh_errbuf *err) {
  if (!zmq_ctx || !cfg || !curve || !zap) return lh_errbuf_set(err, LH_EINVAL, "learner curve: NULL argument");
  memset(curve, 0, sizeof *curve);
  *zap = NULL;
  int has_secret = cfg->curve_secret_key_file[0] != 0, has_allowed = cfg->curve_allowed_keys[0] != 0;
  /* Without CURVE the handler still runs, with no allow-list: it caps the
   * ingest's connections (lh_learner_service_config.zap). */
  if (!has_secret && !has_allowed) return lh_zsock_zap_start(zmq_ctx, NULL, zap, err);
  if (!has_secret || !has_allowed)
    return lh_errbuf_set(err, LH_ELEARNER_CONFIG_VALUE,
                         "[learner] curve_secret_key_file and curve_allowed_keys go together (CURVE without an "
                         "allow-list would authenticate nobody)");
  LH_TRY(lh_zsock_key_read(cfg->curve_secret_key_file, 1, curve->secret, err));
  int rc = lh_zsock_zap_start(zmq_ctx, cfg->curve_allowed_keys, zap, err);
  if (rc < 0) memset(curve, 0, sizeof *curve);
  return rc;
}

int lh_learner_config_check_keys(const lh_learner_config *cfg, lh_errbuf *err) {
  if (!cfg) return lh_errbuf_set(err, LH_EINVAL, "learner curve: NULL config");
  int has_secret = cfg->curve_secret_key_file[0] != 0, has_allowed = cfg->curve_allowed_keys[0] != 0;
  if (!has_secret && !has_allowed) return 0;
  if (!has_secret || !has_allowed)
    return lh_errbuf_set(err, LH_ELEARNER_CONFIG_VALUE,
                         "[learner] curve_secret_key_file and curve_allowed_keys go together (CURVE without an "
                         "allow-list would authenticate nobody)");
  char secret[LH_ZSOCK_KEY_CHARS + 1];
  lh_errbuf why;
  int rc = lh_zsock_key_read(cfg->curve_secret_key_file, 1, secret, &why);
  memset(secret, 0, sizeof secret);
  if (rc) return lh_errbuf_set(err, rc, "[learner] curve_secret_key_file: %s", why.msg);
  rc = lh_zsock_allowed_check(cfg->curve_allowed_keys, NULL, &why);
  return rc ? lh_errbuf_set(err, rc, "[learner] curve_allowed_keys: %s", why.msg) : 0;
}
