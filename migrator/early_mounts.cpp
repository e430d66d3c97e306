#include "early_mounts.hpp"

#include "core/clock.hpp"
#include "core/error.hpp"
#include "criu/criu_features.hpp"
#include "criu/criu_image.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

namespace ferry::migrator {

namespace {

// CRIU writes mnt-early.tmp and renames it once whole.
constexpr const char* early_dir = criu::mounts_early_dir;
// A mount namespace's images are a few KiB; anything near this is not one.
constexpr size_t max_early_bytes = 8u << 20;

} // namespace

early_mounts_sender::early_mounts_sender(std::filesystem::path images_dir, send_fn send)
    : _images_dir(std::move(images_dir)), _send(std::move(send)),
      _inotify(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK)), _wake(::eventfd(0, EFD_CLOEXEC)) {
    if (!_inotify || !_wake)
        throw sys_error("inotify or eventfd for the early mount images");
    if (::inotify_add_watch(_inotify.get(), _images_dir.c_str(), IN_MOVED_TO | IN_ONLYDIR) < 0)
        throw sys_error("inotify watch on " + _images_dir.string());
    _thread = std::thread([this] { watch(); });
}

early_mounts_sender::~early_mounts_sender() {
    (void)stop();
}

std::string early_mounts_sender::stop() noexcept {
    if (_thread.joinable()) {
        const uint64_t one = 1;
        (void)!::write(_wake.get(), &one, sizeof one);
        _thread.join();
    }
    return _outcome;
}

bool early_mounts_sender::arrived() const {
    std::error_code ec;
    return std::filesystem::is_directory(_images_dir / early_dir, ec);
}

void early_mounts_sender::watch() noexcept {
    try {
        // The watch is set before the dump can write: this first look only
        // covers a CRIU faster than the thread's start.
        while (!arrived()) {
            pollfd fds[2] = {{_inotify.get(), POLLIN, 0}, {_wake.get(), POLLIN, 0}};
            if (::poll(fds, 2, -1) < 0 && errno != EINTR)
                throw sys_error("poll for the early mount images");
            if (fds[1].revents)
                return;
            alignas(inotify_event) char buf[4096];
            while (::read(_inotify.get(), buf, sizeof buf) > 0) {
            }
        }
        send_files();
    } catch (const std::exception& e) {
        _outcome = fmt::format("not sent: {}", e.what());
    }
}

void early_mounts_sender::send_files() {
    const uint64_t t0 = monotonic_ns();
    std::vector<criu::engine_file> files;
    size_t bytes = 0;
    for (const auto& entry : std::filesystem::directory_iterator(_images_dir / early_dir)) {
        if (!entry.is_regular_file())
            continue;
        auto data = criu::read_file(entry.path());
        bytes += data.size();
        if (bytes > max_early_bytes)
            throw error(fmt::format("over {} bytes", max_early_bytes));
        files.push_back({entry.path().filename().string(), std::move(data)});
    }
    if (files.empty())
        throw error("CRIU wrote an empty mnt-early");
    _send(files);
    _sent_at = monotonic_ns();
    _outcome = fmt::format("sent: {} files, {} bytes, {:.2f} ms to read and send", files.size(),
                           bytes, ns_to_ms(_sent_at - t0));
}

} // namespace ferry::migrator
