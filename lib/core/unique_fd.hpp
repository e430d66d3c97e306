// A move-only owner of one file descriptor.
#pragma once

#include <unistd.h>

#include <utility>

namespace ferry {

class unique_fd {
  public:
    unique_fd() noexcept = default;
    explicit unique_fd(int fd) noexcept : _fd(fd) {}
    unique_fd(unique_fd&& other) noexcept : _fd(other.release()) {}
    unique_fd& operator=(unique_fd&& other) noexcept {
        if (this != &other)
            reset(other.release());
        return *this;
    }
    unique_fd(const unique_fd&) = delete;
    unique_fd& operator=(const unique_fd&) = delete;
    ~unique_fd() { reset(); }

    [[nodiscard]] int get() const noexcept { return _fd; }
    [[nodiscard]] bool valid() const noexcept { return _fd >= 0; }
    explicit operator bool() const noexcept { return valid(); }

    // The only way to hand the fd to someone else (SCM_RIGHTS, exec).
    [[nodiscard]] int release() noexcept { return std::exchange(_fd, -1); }

    void reset(int fd = -1) noexcept {
        if (_fd >= 0)
            ::close(_fd);
        _fd = fd;
    }

  private:
    int _fd = -1;
};

} // namespace ferry
