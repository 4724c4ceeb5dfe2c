/* cli: the one way a command catches signals (cli/commands.h). */
#include <signal.h>
#include <string.h>

#include "cli/commands.h"

void lh_cli_on_signals(void (*handler)(int), const int *signals, size_t count) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;  /* no SA_RESTART: a blocking wait returns EINTR and sees the flag */
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < count; i++) sigaction(signals[i], &sa, NULL);
}
