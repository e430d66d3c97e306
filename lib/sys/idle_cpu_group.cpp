#include "sys/idle_cpu_group.hpp"

#include "sys/mountinfo.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <optional>

namespace ferry::proc {

namespace fs = std::filesystem;

namespace {

bool has_cpu(const std::string& list) {
    const auto items = comma_list(list);
    return std::find(items.begin(), items.end(), "cpu") != items.end();
}

// The cgroup in the v1 hierarchy that holds the cpu controller, from a
// /proc cgroup file ("ID:CONTROLLERS:PATH").
std::optional<std::string> cpu_cgroup_in(const fs::path& file) {
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) {
        const auto a = line.find(':');
        const auto b = a == std::string::npos ? a : line.find(':', a + 1);
        if (b == std::string::npos)
            continue;
        if (has_cpu(line.substr(a + 1, b - a - 1)))
            return line.substr(b + 1);
    }
    return std::nullopt;
}

// Where the cpu hierarchy is mounted in this mount namespace: its top as
// the namespace shows it, and `cgroup` (a path in the hierarchy) there.
struct cpu_hierarchy {
    fs::path top, cgroup_dir;
};

std::optional<cpu_hierarchy> find_cpu_hierarchy(const fs::path& proc, const std::string& cgroup) {
    for (const auto& m : read_mountinfo(proc / "self/mountinfo")) {
        if (m.fstype != "cgroup" || !has_cpu(m.super_options))
            continue;
        // The mount shows the hierarchy from m.root down (a container's
        // namespace may show only its own part).
        const std::string root = m.root == "/" ? "" : m.root;
        if (cgroup.compare(0, root.size(), root) != 0)
            continue;
        const std::string rest = cgroup.substr(root.size());
        return cpu_hierarchy{m.point, fs::path(m.point) / fs::path(rest).relative_path()};
    }
    return std::nullopt;
}

bool write_file(const fs::path& path, std::string_view text) {
    unique_fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    return fd && ::write(fd.get(), text.data(), text.size()) == ssize_t(text.size());
}

bool write_tid(int fd, pid_t tid) noexcept {
    if (tid == 0)
        tid = pid_t(::gettid());
    char text[16];
    const auto end = std::to_chars(text, text + sizeof text, tid).ptr;
    return ::write(fd, text, size_t(end - text)) == end - text;
}

} // namespace

idle_cpu_group idle_cpu_group::open(std::string_view name, const fs::path& proc) {
    idle_cpu_group g;
    const auto own = cpu_cgroup_in(proc / "self/cgroup");
    if (!own) {
        g._why_not = "no cgroup v1 cpu hierarchy (cgroup v2 is not supported yet)";
        return g;
    }
    const auto hierarchy = find_cpu_hierarchy(proc, *own);
    if (!hierarchy) {
        g._why_not = fmt::format("the cpu cgroup {} is not mounted here", *own);
        return g;
    }
    const fs::path& home = hierarchy->cgroup_dir;
    g._dir = hierarchy->top / std::string(name);
    std::error_code ec;
    fs::create_directory(g._dir, ec);
    if (ec) {
        g._why_not = fmt::format("cannot make {}: {}", g._dir.string(), ec.message());
        return g;
    }
    if (!fs::exists(g._dir / "cpu.idle")) {
        g._why_not = "the kernel has no cpu.idle (Linux 5.15 and later)";
        g.remove_if_empty();
        return g;
    }
    if (!write_file(g._dir / "cpu.idle", "1")) {
        g._why_not =
            fmt::format("cannot set {}/cpu.idle: {}", g._dir.string(), std::strerror(errno));
        g.remove_if_empty();
        return g;
    }
    unique_fd home_tasks(::open((home / "tasks").c_str(), O_WRONLY | O_CLOEXEC));
    unique_fd group_tasks(::open((g._dir / "tasks").c_str(), O_WRONLY | O_CLOEXEC));
    if (!home_tasks || !group_tasks) {
        g._why_not = fmt::format("cannot open the tasks files of {} and {}: {}", home.string(),
                                 g._dir.string(), std::strerror(errno));
        g.remove_if_empty();
        return g;
    }
    g._home_tasks = std::move(home_tasks);
    g._group_tasks = std::move(group_tasks);
    return g;
}

std::string calling_thread_cpu_cgroup(const fs::path& proc) {
    return cpu_cgroup_in(proc / "thread-self/cgroup").value_or("");
}

bool idle_cpu_group::join(pid_t tid) const noexcept {
    if (!usable()) {
        errno = ENOENT;
        return false;
    }
    return write_tid(_group_tasks.get(), tid);
}

bool idle_cpu_group::leave(pid_t tid) const noexcept {
    if (!usable()) {
        errno = ENOENT;
        return false;
    }
    return write_tid(_home_tasks.get(), tid);
}

void idle_cpu_group::remove_if_empty() const noexcept {
    if (!_dir.empty())
        (void)::rmdir(_dir.c_str()); // EBUSY while a thread is in it
}

} // namespace ferry::proc
