#include "sys/sched_policy.hpp"

#include <sched.h>

namespace ferry::proc {

bool set_idle_policy(bool idle, pid_t tid) noexcept {
    sched_param none{};
    return ::sched_setscheduler(tid, idle ? SCHED_IDLE : SCHED_OTHER, &none) == 0;
}

} // namespace ferry::proc
