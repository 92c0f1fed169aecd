#include "hpctrain/train/preemption.hpp"

#include <csignal>

namespace hpctrain::train {

namespace {
volatile std::sig_atomic_t g_signal = 0;
extern "C" void on_preemption_signal(int sig) { g_signal = sig; }
}  // namespace

void install_preemption_handlers() {
  struct sigaction action {};
  action.sa_handler = on_preemption_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // interrupted reads and writes resume
  sigaction(SIGUSR1, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

bool preemption_requested() noexcept { return g_signal != 0; }
int preemption_signal() noexcept { return g_signal; }
void reset_preemption() noexcept { g_signal = 0; }

}  // namespace hpctrain::train
