#include "sys/vma_flag_watch.hpp"

#include "core/error.hpp"
#include "sys/proc.hpp"
#include "sys/subprocess.hpp"

#include <fmt/format.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <sstream>

namespace ferry::proc {

namespace {

// The advices that set or clear a VMA flag (mm/madvise.c madvise_behavior).
constexpr const char* madvise_filter = "behavior <= 2 || (behavior >= 10 && behavior <= 19)";
constexpr const char* prctl_filter = "option == 67"; // PR_SET_MEMORY_MERGE
// mlock, munlock, mlockall, munlockall, mlock2, by number.
const std::string mlock_filter =
    fmt::format("id == {} || id == {} || id == {} || id == {} || id == {}", SYS_mlock, SYS_munlock,
                SYS_mlockall, SYS_munlockall, SYS_mlock2);

// The ids, from tracefs where the host mounted it, else from a tracefs
// mounted in a helper's private mount namespace (gone when it exits).
std::string read_ids() {
    const std::string files = "events/syscalls/sys_enter_madvise/id "
                              "events/syscalls/sys_enter_prctl/id "
                              "events/raw_syscalls/sys_enter/id";
    const auto timeout = std::chrono::seconds(5);
    if (::access("/sys/kernel/tracing/events/raw_syscalls/sys_enter/id", R_OK) == 0)
        return run_capture({"sh", "-c", "cd /sys/kernel/tracing && cat " + files}, timeout);
    return run_capture({"unshare", "--mount", "--propagation", "private", "sh", "-c",
                        "mount -t tracefs nodev /sys/kernel/tracing && cd /sys/kernel/tracing "
                        "&& cat " +
                            files},
                       timeout);
}

unique_fd open_counter(pid_t tid, uint64_t id, const std::string& filter) {
    perf_event_attr attr{};
    attr.type = PERF_TYPE_TRACEPOINT;
    attr.size = sizeof attr;
    attr.config = id;
    attr.disabled = 1; // enabled once filtered: the ioctl would count itself
    unique_fd fd(int(::syscall(SYS_perf_event_open, &attr, tid, -1, -1, PERF_FLAG_FD_CLOEXEC)));
    if (!fd)
        throw sys_error(fmt::format("perf_event_open (tracepoint {}) for thread {}", id, tid));
    if (::ioctl(fd.get(), PERF_EVENT_IOC_SET_FILTER, filter.c_str()))
        throw sys_error(fmt::format("PERF_EVENT_IOC_SET_FILTER '{}'", filter));
    if (::ioctl(fd.get(), PERF_EVENT_IOC_ENABLE, 0))
        throw sys_error("PERF_EVENT_IOC_ENABLE");
    return fd;
}

std::map<pid_t, std::vector<pid_t>> threads_of_tree(pid_t root) {
    std::map<pid_t, std::vector<pid_t>> out;
    for (const pid_t pid : tree(root)) {
        auto& tids = out[pid];
        for (const auto& t : threads(pid))
            tids.push_back(t.tid);
        std::sort(tids.begin(), tids.end());
    }
    return out;
}

} // namespace

std::optional<watch_tracepoints> probe_watch_tracepoints(std::string& why_not) {
    static std::mutex lock;
    static std::optional<watch_tracepoints> known;
    static std::string known_why;
    static bool probed = false;
    const std::scoped_lock hold(lock);
    if (!probed) {
        probed = true;
        try {
            std::istringstream in(read_ids());
            watch_tracepoints ids;
            if (!(in >> ids.madvise >> ids.prctl >> ids.raw_syscall))
                throw error("tracefs gave no tracepoint ids");
            known = ids;
        } catch (const std::exception& e) {
            known_why = e.what();
        }
    }
    why_not = known_why;
    return known;
}

vma_flag_watch::vma_flag_watch(pid_t root, const watch_tracepoints& ids)
    : _root(root), _threads(threads_of_tree(root)) {
    for (const auto& [pid, tids] : _threads)
        for (const pid_t tid : tids) {
            _counters.push_back(open_counter(tid, ids.madvise, madvise_filter));
            _counters.push_back(open_counter(tid, ids.prctl, prctl_filter));
            _counters.push_back(open_counter(tid, ids.raw_syscall, mlock_filter));
        }
}

vma_flag_watch::verdict vma_flag_watch::check() const {
    uint64_t calls = 0;
    for (const auto& fd : _counters) {
        uint64_t n = 0;
        if (::read(fd.get(), &n, sizeof n) != ssize_t(sizeof n))
            return {false, fmt::format("cannot read a perf counter: {}", std::strerror(errno))};
        calls += n;
    }
    if (calls)
        return {false, fmt::format("the tree made {} madvise, mlock or prctl call(s) that can "
                                   "change VMA flags",
                                   calls)};
    for (const auto& [pid, tids] : threads_of_tree(_root)) {
        auto it = _threads.find(pid);
        for (const pid_t tid : tids)
            if (it == _threads.end() ||
                !std::binary_search(it->second.begin(), it->second.end(), tid))
                return {false, fmt::format("thread {} of pid {} started meanwhile", tid, pid)};
    }
    return {true, {}};
}

} // namespace ferry::proc
