#include "network_hook.hpp"

#include "core/error.hpp"
#include "core/unique_fd.hpp"
#include "sys/mountinfo.hpp"
#include "sys/subprocess.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

namespace ferry::engines {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* setkey_argv0 = "libnetwork-setkey";

const json* network_namespace(const json& spec) {
    const auto linux_it = spec.find("linux");
    if (linux_it == spec.end() || !linux_it->contains("namespaces"))
        return nullptr;
    for (const auto& ns : (*linux_it)["namespaces"])
        if (ns.value("type", "") == "network")
            return &ns;
    return nullptr;
}
json* network_namespace(json& spec) {
    return const_cast<json*>(network_namespace(std::as_const(spec)));
}

// The index of libnetwork's hook among the prestart hooks (OCI hooks'
// args start with argv[0], which dockerd's re-exec dispatches on).
std::optional<size_t> setkey_hook(const json& spec) {
    const auto hooks = spec.find("hooks");
    if (hooks == spec.end() || !hooks->contains("prestart"))
        return std::nullopt;
    const auto& prestart = (*hooks)["prestart"];
    for (size_t i = 0; i < prestart.size(); i++) {
        const auto& args = prestart[i].value("args", json::array());
        if (!args.empty() && args[0].is_string() && args[0].get<std::string>() == setkey_argv0)
            return i;
    }
    return std::nullopt;
}

// A process alone in a new network namespace, until destroyed: the pid the
// hook is given (libnetwork binds /proc/PID/ns/net to its sandbox path).
class namespace_holder {
  public:
    explicit namespace_holder(std::chrono::milliseconds bound) {
        int ready[2], hold[2];
        if (::pipe2(ready, O_CLOEXEC) || ::pipe2(hold, O_CLOEXEC))
            throw sys_error("pipe");
        unique_fd ready_r(ready[0]), ready_w(ready[1]), hold_w(hold[1]);
        unique_fd hold_r(hold[0]);
        _pid = ::fork();
        if (_pid < 0)
            throw sys_error("fork");
        if (_pid == 0) {
            // Async-signal-safe calls only. It dies with its parent, and
            // otherwise when the parent closes its end of `hold`.
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (::unshare(CLONE_NEWNET) != 0)
                ::_exit(1);
            const char r = 'r';
            if (::write(ready_w.get(), &r, 1) != 1)
                ::_exit(1);
            ready_w.reset();
            hold_w.reset();
            char c;
            while (::read(hold_r.get(), &c, 1) < 0 && errno == EINTR) {
            }
            ::_exit(0);
        }
        ready_w.reset();
        _hold = std::move(hold_w);
        pollfd p{ready_r.get(), POLLIN, 0};
        char r = 0;
        if (::poll(&p, 1, int(bound.count())) != 1 || ::read(ready_r.get(), &r, 1) != 1)
            throw error("the process that was to hold a new network namespace did not make it "
                        "(unshare(CLONE_NEWNET) failed, or it took longer than " +
                        std::to_string(bound.count()) + " ms)");
        struct stat st {};
        if (::stat(fmt::format("/proc/{}/ns/net", _pid).c_str(), &st) != 0)
            throw sys_error("stat the new network namespace");
        _inode = st.st_ino;
    }
    ~namespace_holder() {
        _hold.reset();
        ::kill(_pid, SIGKILL);
        while (::waitpid(_pid, nullptr, 0) < 0 && errno == EINTR) {
        }
    }
    namespace_holder(const namespace_holder&) = delete;
    namespace_holder& operator=(const namespace_holder&) = delete;

    [[nodiscard]] pid_t pid() const { return _pid; }
    [[nodiscard]] uint64_t inode() const { return _inode; }

  private:
    pid_t _pid = -1;
    unique_fd _hold;
    uint64_t _inode = 0;
};

void run_hook(const json& hook, const json& state, std::chrono::milliseconds bound) {
    const auto path = hook.value("path", "");
    std::vector<std::string> argv;
    for (const auto& a : hook.value("args", json::array()))
        argv.push_back(a.get<std::string>());
    if (argv.empty())
        argv.push_back(path);
    command_input in;
    in.program = path;
    in.stdin_text = state.dump();
    if (hook.contains("env"))
        in.env = hook["env"].get<std::vector<std::string>>();
    auto timeout = bound;
    if (hook.contains("timeout"))
        timeout = std::min(timeout, std::chrono::milliseconds(hook["timeout"].get<int>() * 1000));
    (void)run_capture(argv, timeout, in);
}

void write_spec(const fs::path& file, const json& spec) {
    const fs::path tmp = file.string() + ".ferry-tmp";
    {
        std::ofstream out(tmp);
        out << spec.dump();
        out.close();
        if (!out)
            throw error("cannot write " + tmp.string());
    }
    if (::rename(tmp.c_str(), file.c_str()) != 0)
        throw sys_error("rename " + tmp.string());
}

} // namespace

bool network_set_up_by_hook(const json& spec) {
    const auto* ns = network_namespace(spec);
    return ns && ns->value("path", "").empty() && setkey_hook(spec).has_value();
}

bool network_namespace_made_in_restore(const json& spec) {
    const auto* ns = network_namespace(spec);
    return ns && ns->value("path", "").empty();
}

fs::path netns_mount_point(const std::string& mountinfo, uint64_t inode) {
    const std::string root = fmt::format("net:[{}]", inode);
    for (const auto& m : parse_mountinfo(mountinfo))
        if (m.fstype == "nsfs" && m.root == root)
            return m.point;
    return {};
}

fs::path set_up_network_before_restore(const fs::path& bundle, const std::string& container_id,
                                       std::chrono::milliseconds bound) {
    const fs::path config = bundle / "config.json";
    json spec;
    try {
        std::ifstream in(config);
        spec = json::parse(in);
    } catch (const std::exception& e) {
        throw error(fmt::format("cannot read {}: {}", config.string(), e.what()));
    }
    auto* ns = network_namespace(spec);
    const auto hook = setkey_hook(spec);
    if (!ns || !ns->value("path", "").empty() || !hook)
        throw error(config.string() + " has no network namespace for libnetwork's hook to set up");
    const namespace_holder holder(bound);
    json state = {{"ociVersion", spec.value("ociVersion", "1.0.2")},
                  {"id", container_id},
                  {"status", "creating"},
                  {"pid", holder.pid()},
                  {"bundle", bundle.string()}};
    if (spec.contains("annotations"))
        state["annotations"] = spec["annotations"];
    try {
        run_hook(spec["hooks"]["prestart"][*hook], state, bound);
    } catch (const std::exception& e) {
        throw error(fmt::format("docker's network hook failed before the restore: {}", e.what()));
    }
    std::ifstream mi("/proc/self/mountinfo");
    std::stringstream text;
    text << mi.rdbuf();
    const auto path = netns_mount_point(text.str(), holder.inode());
    if (path.empty())
        throw error(fmt::format("docker's network hook ran, but bound the new namespace "
                                "(net:[{}]) nowhere this process sees",
                                holder.inode()));
    (*ns)["path"] = path.string();
    auto& prestart = spec["hooks"]["prestart"];
    prestart.erase(prestart.begin() + long(*hook));
    if (prestart.empty())
        spec["hooks"].erase("prestart");
    if (spec["hooks"].empty())
        spec.erase("hooks");
    write_spec(config, spec);
    return path;
}

} // namespace ferry::engines
