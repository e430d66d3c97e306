#include "sys/idle_poll.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <system_error>

#include <fmt/format.h>

namespace ferry::idle_poll {

namespace {

constexpr const char* device = "/dev/cpu_dma_latency";
// PM_QOS_CPU_LATENCY_DEFAULT_VALUE: the value of "no constraint".
constexpr int32_t no_constraint_us = 2'000'000'000;

bool write_target(int fd, int32_t us) noexcept {
    return ::write(fd, &us, sizeof us) == ssize_t(sizeof us);
}

} // namespace

std::string why_no_effect() {
    std::ifstream in("/sys/devices/system/cpu/cpuidle/current_driver");
    std::string driver;
    if (!(in >> driver) || driver == "none")
        return "no cpuidle driver: idle CPUs halt whatever is asked";
    return {};
}

hold::hold(std::chrono::milliseconds limit) : _limit(limit) {
    if (auto why = why_no_effect(); !why.empty()) {
        _why_not = std::move(why);
        return;
    }
    unique_fd fd(::open(device, O_WRONLY | O_CLOEXEC));
    if (!fd) {
        _why_not = fmt::format("open {}: {}", device, std::strerror(errno));
        return;
    }
    if (!write_target(fd.get(), 0)) {
        _why_not = fmt::format("write {}: {}", device, std::strerror(errno));
        return;
    }
    _fd = std::move(fd);
    try {
        _lapse = std::thread([this] { lapse(); });
    } catch (const std::system_error& e) {
        // No hold without its bound.
        _fd.reset();
        _why_not = fmt::format("no thread to end it after {} ms: {}", _limit.count(), e.what());
    }
}

hold::~hold() {
    {
        std::lock_guard lock(_mu);
        _done = true;
    }
    _released.notify_all();
    if (_lapse.joinable())
        _lapse.join();
    // Closing the file drops the request.
}

void hold::lapse() {
    std::unique_lock lock(_mu);
    if (_released.wait_for(lock, _limit, [this] { return _done; }))
        return;
    // The request stays open but asks for nothing: the owner closes it.
    (void)write_target(_fd.get(), no_constraint_us);
    _lapsed = true;
}

std::string hold::state() const {
    if (!_fd)
        return "not held: " + _why_not;
    std::lock_guard lock(_mu);
    if (_lapsed)
        return fmt::format("lapsed after its limit of {} ms", _limit.count());
    return "held";
}

long long current_target_us() {
    unique_fd fd(::open(device, O_RDONLY | O_CLOEXEC));
    int32_t value = 0;
    if (!fd || ::read(fd.get(), &value, sizeof value) != ssize_t(sizeof value))
        return -1;
    return value;
}

} // namespace ferry::idle_poll
