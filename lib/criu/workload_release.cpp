#include "criu/workload_release.hpp"

#include "core/log.hpp"
#include "sys/proc.hpp"
#include "sys/subprocess.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

namespace ferry::criu {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using clock = std::chrono::steady_clock;

namespace {

// The network namespace of `pid` ("net:[N]"), or "" if it cannot be read.
std::string net_ns(pid_t pid) {
    std::error_code ec;
    return fs::read_symlink(fmt::format("/proc/{}/ns/net", pid), ec).string();
}

// Whether `pid` shows `text` in its command line (CRIU's process title names
// its images directory) or in the path of a file it holds open (its log, its
// images directory).
bool shows_in_title_or_files(pid_t pid, const std::string& text) {
    if (proc::cmdline(pid).find(text) != std::string::npos)
        return true;
    std::error_code ec;
    for (const auto& fd : fs::directory_iterator(fmt::format("/proc/{}/fd", pid), ec)) {
        std::error_code lec;
        if (fs::read_symlink(fd.path(), lec).string().find(text) != std::string::npos)
            return true;
    }
    return false;
}

} // namespace

std::vector<pid_t> find_migration_criu(const std::string& migration_id) {
    std::vector<pid_t> out;
    if (migration_id.empty())
        return out;
    const std::string entry = "FERRY_MIGRATION_ID=" + migration_id;
    std::error_code ec;
    // This host's CRIU runs in this host's network namespace. The one that
    // restores the same migration runs in its destination's: another host,
    // even where both hosts share a machine (the testbed's namespaces).
    const std::string our_net = net_ns(::getpid());
    for (const auto& d : fs::directory_iterator("/proc", ec)) {
        const auto name = d.path().filename().string();
        if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit))
            continue;
        const auto pid = pid_t(std::stoi(name));
        if (pid == ::getpid() || proc::comm(pid) != "criu")
            continue;
        // One that has ended holds no task and no lock: only its parent has
        // yet to reap it.
        if (const auto st = proc::state(pid); !st || *st == 'Z' || *st == 'X')
            continue;
        if (!our_net.empty() && net_ns(pid) != our_net)
            continue;
        // CRIU writes its process title over its environment, so the id
        // is looked for where it survives: in the parent's environment (runc
        // under an engine), or in the images directory and log that Ferry
        // names after the migration (its own dumps, docker's).
        if (proc::environ_has(pid, entry) || proc::environ_has(proc::parent(pid), entry) ||
            shows_in_title_or_files(pid, "/" + migration_id))
            out.push_back(pid);
    }
    return out;
}

bool workload_state::running() const {
    if (tasks.empty())
        return false;
    return std::all_of(tasks.begin(), tasks.end(), [](const task& t) {
        return t.tracer == 0 && t.state != 't' && t.state != 'T' && t.state != 'Z' &&
               t.state != 'X';
    });
}

bool workload_state::gone() const {
    return std::all_of(tasks.begin(), tasks.end(),
                       [](const task& t) { return t.state == 'Z' || t.state == 'X'; });
}

std::string workload_state::describe_stuck() const {
    std::string s;
    for (const auto& t : tasks) {
        if (t.tracer == 0 && t.state != 't' && t.state != 'T')
            continue;
        s +=
            fmt::format("{}pid {} (tid {}) state {}", s.empty() ? "" : "; ", t.pid, t.tid, t.state);
        if (t.tracer)
            s += fmt::format(" traced by {} ({})", t.tracer, proc::comm(t.tracer));
    }
    return s;
}

namespace {

bool maps_parasite(pid_t pid) {
    std::ifstream in(fmt::format("/proc/{}/maps", pid));
    std::string line;
    while (std::getline(in, line))
        if (line.find("CRIUMFD") != std::string::npos)
            return true;
    return false;
}

// The file that freezes the cgroup of `pid`: v1 freezer.state or v2
// cgroup.freeze; empty if neither.
fs::path freezer_file(pid_t pid) {
    std::ifstream in(fmt::format("/proc/{}/cgroup", pid));
    std::string line;
    fs::path v2;
    while (std::getline(in, line)) {
        // "ID:CONTROLLERS:PATH"
        const auto a = line.find(':');
        const auto b = line.find(':', a + 1);
        if (a == std::string::npos || b == std::string::npos)
            continue;
        const auto controllers = line.substr(a + 1, b - a - 1);
        const auto path = line.substr(b + 1);
        if (controllers.find("freezer") != std::string::npos) {
            const fs::path f =
                fs::path("/sys/fs/cgroup/freezer") / path.substr(1) / "freezer.state";
            if (fs::exists(f))
                return f;
        }
        if (line.rfind("0::", 0) == 0) {
            for (const char* root : {"/sys/fs/cgroup/unified", "/sys/fs/cgroup"}) {
                const fs::path f = fs::path(root) / path.substr(1) / "cgroup.freeze";
                if (fs::exists(f)) {
                    v2 = f;
                    break;
                }
            }
        }
    }
    return v2;
}

std::string read_word(const fs::path& f) {
    std::ifstream in(f);
    std::string w;
    in >> w;
    return w;
}

// Runs `argv` inside the network namespace of `pid`, for 5 s at most and
// not past `until`: its output, or nullopt if it failed or ran out of time.
std::optional<std::string> in_net_ns(pid_t pid, std::vector<std::string> argv,
                                     clock::time_point until) {
    const auto left = std::chrono::duration_cast<milliseconds>(until - clock::now());
    if (left <= milliseconds(0))
        return std::nullopt;
    argv.insert(argv.begin(), {"nsenter", fmt::format("--net=/proc/{}/ns/net", pid), "--"});
    try {
        return run_capture(argv, std::min(left, milliseconds(5000)));
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

// The whole unlock, however many commands it runs: a release must end.
constexpr auto network_unlock_bound = std::chrono::seconds(20);
// CRIU adds one jump to its chain per hook; more would be someone else's.
constexpr int max_jump_deletes = 8;

// CRIU locks a network namespace it dumps (iptables chain CRIU, or an
// nftables table CRIU-<pid>) and unlocks it only when it ends by itself.
bool unlock_network(pid_t pid) {
    if (net_ns(pid).empty() || net_ns(pid) == net_ns(::getpid()))
        return false; // the workload shares this host's network: CRIU locked nothing
    const auto until = clock::now() + network_unlock_bound;
    bool unlocked = false;
    for (const char* tool : {"iptables", "ip6tables"}) {
        if (!in_net_ns(pid, {tool, "-w", "-S", "CRIU"}, until))
            continue;
        for (const char* hook : {"INPUT", "OUTPUT"})
            for (int i = 0; i < max_jump_deletes &&
                            in_net_ns(pid, {tool, "-w", "-D", hook, "-j", "CRIU"}, until);
                 i++) {
            }
        (void)in_net_ns(pid, {tool, "-w", "-F", "CRIU"}, until);
        unlocked |= in_net_ns(pid, {tool, "-w", "-X", "CRIU"}, until).has_value();
    }
    // No nft here (or no time left): CRIU could not have used it either.
    std::istringstream lines(in_net_ns(pid, {"nft", "list", "tables"}, until).value_or(""));
    std::string word, family, name;
    while (lines >> word >> family >> name)
        if (word == "table" && name.rfind("CRIU-", 0) == 0)
            unlocked |= in_net_ns(pid, {"nft", "delete", "table", family, name}, until).has_value();
    return unlocked;
}

// Until every process in `pids` is gone or a zombie, or `until`.
bool wait_gone(const std::vector<pid_t>& pids, clock::time_point until) {
    for (;;) {
        const bool all = std::all_of(pids.begin(), pids.end(), [](pid_t p) {
            const auto st = proc::state(p);
            return !st || *st == 'Z' || *st == 'X';
        });
        if (all)
            return true;
        if (clock::now() >= until)
            return false;
        std::this_thread::sleep_for(milliseconds(5));
    }
}

} // namespace

workload_state inspect_workload(pid_t root) {
    workload_state w;
    for (const pid_t p : proc::tree(root)) {
        for (const auto& t : proc::threads(p))
            w.tasks.push_back({p, t.tid, t.state, t.tracer});
        if (maps_parasite(p))
            w.parasite_mapped.push_back(p);
    }
    return w;
}

bool cgroup_frozen(pid_t pid) {
    const auto f = freezer_file(pid);
    if (f.empty())
        return false;
    const auto now = read_word(f);
    return f.filename() == "freezer.state" ? now != "THAWED" : now == "1";
}

bool set_cgroup_frozen(pid_t pid, bool frozen) {
    const auto f = freezer_file(pid);
    if (f.empty())
        return false;
    const bool v1 = f.filename() == "freezer.state";
    std::ofstream out(f);
    out << (v1 ? (frozen ? "FROZEN" : "THAWED") : (frozen ? "1" : "0"));
    return bool(out);
}

namespace {

bool thaw(pid_t pid) {
    return cgroup_frozen(pid) && set_cgroup_frozen(pid, false);
}

} // namespace

release_result release_workload(const release_request& r) {
    release_result res;
    const auto until = clock::now() + r.bound;
    auto log = make_logger("release");
    // The tree is read while CRIU still holds it still.
    const auto tree = proc::tree(r.root);
    if (r.end_workload) {
        for (const pid_t p : tree)
            ::kill(p, SIGKILL); // works on traced and stopped tasks alike
    }
    std::vector<pid_t> criu = r.criu;
    for (const pid_t p : find_migration_criu(r.migration_id))
        if (std::find(criu.begin(), criu.end(), p) == criu.end())
            criu.push_back(p);
    for (const pid_t p : criu) {
        if (proc::exists(p) && ::kill(p, SIGKILL) == 0)
            res.killed_criu.push_back(p);
    }
    const bool criu_gone = wait_gone(res.killed_criu, until);
    if (r.after_criu_killed)
        r.after_criu_killed();
    if (!r.end_workload) {
        if (!r.was_frozen_before)
            res.thawed = thaw(r.root);
        res.network_unlocked = unlock_network(r.root);
    }
    // Detached tasks need a moment to leave their ptrace stop.
    for (;;) {
        res.final_state = inspect_workload(r.root);
        res.ok = r.end_workload ? res.final_state.gone() : res.final_state.running();
        if (res.ok || clock::now() >= until)
            break;
        std::this_thread::sleep_for(milliseconds(10));
    }
    std::string done;
    if (!res.killed_criu.empty())
        done += fmt::format("killed CRIU (pid {}{})", fmt::join(res.killed_criu, ", "),
                            criu_gone ? "" : ", still not gone");
    else
        done += "no CRIU was left to kill";
    if (res.thawed)
        done += "; thawed its freezer cgroup";
    if (res.network_unlocked)
        done += "; removed CRIU's network lock";
    if (r.end_workload) {
        res.summary = res.ok ? fmt::format("{}; the source tree (pid {}) is gone", done, r.root)
                             : fmt::format("{}; the source tree (pid {}) is still there: {}", done,
                                           r.root, res.final_state.describe_stuck());
    } else if (res.ok) {
        res.summary = fmt::format("{}; the workload runs (pid {}, {} threads)", done, r.root,
                                  res.final_state.tasks.size());
        if (!res.final_state.parasite_mapped.empty())
            res.summary += fmt::format(" with CRIU's parasite blob still mapped in pid {} "
                                       "(harmless, freed when it exits)",
                                       fmt::join(res.final_state.parasite_mapped, ", "));
    } else if (res.final_state.tasks.empty()) {
        res.summary =
            fmt::format("{}; the workload (pid {}) is gone: it did not survive", done, r.root);
    } else {
        res.summary = fmt::format("{}; the workload (pid {}) does not run: {}", done, r.root,
                                  res.final_state.describe_stuck());
    }
    (res.ok ? log->info("{}", res.summary) : log->error("{}", res.summary));
    return res;
}

} // namespace ferry::criu
