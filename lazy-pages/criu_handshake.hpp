// CRIU's side of the lazy-pages socket (criu/uffd.c): restore connects to
// `lazy-pages.socket` in its work dir and sends, for each task, an int pid
// and (for a live task) its userfaultfd over SCM_RIGHTS. A negative pid is a
// zombie with no uffd. Later it sends "restore finished" on the same socket.
#pragma once

#include "core/unique_fd.hpp"

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>

namespace ferry::lazy {

inline constexpr const char* lazy_socket_name = "lazy-pages.socket";

// Binds and listens on `lazy-pages.socket` inside `work_dir`. The path is
// bound relative to the directory (as CRIU does), so long work dirs work.
unique_fd listen_lazy_socket(const std::filesystem::path& work_dir);

// Accepts restore's connection. `abort_fd` (may be -1) is watched too: if it
// becomes readable or hangs up first, the wait ends with an error.
unique_fd accept_restore(int listen_fd, std::chrono::milliseconds timeout, int abort_fd);

// Receives `nr_tasks` records, calling on_task(pid, uffd) for each live task.
void receive_uffds(int sock, size_t nr_tasks, const std::function<void(pid_t, unique_fd)>& on_task);

} // namespace ferry::lazy
