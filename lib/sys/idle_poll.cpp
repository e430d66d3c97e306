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
        _lapse.emplace(_limit, [this] { (void)write_target(_fd.get(), no_constraint_us); });
    } catch (const std::system_error& e) {
        // No hold without its bound.
        _fd.reset();
        _why_not = fmt::format("no thread to end it after {} ms: {}", _limit.count(), e.what());
    }
}

hold::~hold() {
    _lapse.reset(); // before the file closes, which drops the request
}

std::string hold::state() const {
    if (!_fd)
        return "not held: " + _why_not;
    if (_lapse && _lapse->lapsed())
        return fmt::format("lapsed after its limit of {} ms", _limit.count());
    return "held";
}

bool hold::lapsed() const {
    return _fd && _lapse && _lapse->lapsed();
}

std::unique_ptr<hold> renewed(std::unique_ptr<hold> h, std::chrono::milliseconds limit) {
    if (!h || !h->lapsed())
        return h;
    auto next = std::make_unique<hold>(limit);
    return next->held() ? std::move(next) : std::move(h);
}

long long current_target_us() {
    unique_fd fd(::open(device, O_RDONLY | O_CLOEXEC));
    int32_t value = 0;
    if (!fd || ::read(fd.get(), &value, sizeof value) != ssize_t(sizeof value))
        return -1;
    return value;
}

} // namespace ferry::idle_poll
