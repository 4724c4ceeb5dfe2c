/* A peer of a real learner process, played by a DEALER in the test: the
 * connection, its Hello, one envelope out, one in, the status of one
 * message's ack, and a whole small episode sent and acked, as an actor at
 * version 0 would. Every failure fails the test. */
#ifndef LH_TESTS_PEER_FIXTURE_H
#define LH_TESTS_PEER_FIXTURE_H

#include <stdint.h>

#include "proto/wire.h"

/* Tokens of a peer_send_episode episode, and of each of its segments. */
#define LH_PEER_EP_TOKENS 12
#define LH_PEER_SEG_TOKENS 6

/* A DEALER connected to endpoint, linger 0, receives waiting up to
 * timeout_ms. */
void *lh_peer_dealer(void *zmq_ctx, const char *endpoint, int timeout_ms);
/* A Hello under name (NULL: "a0"), waiting for its ack, which must be
 * ACK_STORED: the learner takes a name's messages only from the
 * connection that said Hello under it. */
void lh_peer_hello(void *d, const char *name);
/* Fills the envelope's header (sender may be NULL: "a0"), encodes, sends. */
void lh_peer_send(void *d, Longhaul__Envelope *env, uint64_t msg_id, const char *sender);
/* The next message, decoded (free with lh_wire_free). */
Longhaul__Envelope *lh_peer_recv(void *d);
/* The statuses the learner acked msg ids first..first+n-1 with, into
 * status[n], however its Acks group them; acks of other ids are read
 * past. */
void lh_peer_acks(void *d, uint64_t first, size_t n, int *status);
/* The same for one message. */
int lh_peer_ack_of(void *d, uint64_t msg_id);
/* Episode id of group (two segments and the end, actor "a0", env calc,
 * msg ids id*10+seq and id*10+9), waiting until all three are acked
 * STORED. */
void lh_peer_send_episode(void *d, uint64_t id, uint64_t group, float reward);

#endif
