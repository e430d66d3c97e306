// ferry-runc: the runc that container engines run when Ferry is installed.
// It passes every command to the real runc unchanged, except a checkpoint or
// restore for which Ferry left a request (lib/engine_request.hpp): those get
// runc's lazy-pages options, and CRIU under it gets Ferry's environment: the
// gate that ferry-criu-action, CRIU's action script, asks at post-restore
// (Ferry's commit gate: the tasks resume only if the destination daemon says
// so) and, when the network moves, at setup-namespaces.
#include "core/unique_fd.hpp"
#include "engine_request.hpp"
#include "line_socket.hpp"
#include "network_hook.hpp"
#include "runc_state.hpp"
#include "sys/subprocess.hpp"
#include "wire/criu_event_wire.hpp"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using namespace ferry;

// A held checkpoint waits for the destination to start its restore (seconds);
// a warm restore waits for the source's freeze and images. Either peer
// closes its socket when it gives up, so these bounds are only the last resort.
constexpr auto hold_timeout = std::chrono::seconds(300);
constexpr auto images_timeout = std::chrono::seconds(600);
constexpr auto untar_timeout = std::chrono::seconds(60);
// Docker's network hook, run ahead of a restore (~150 ms here on a
// user-defined network).
constexpr auto network_hook_timeout = std::chrono::seconds(60);

void say(const std::string& what) {
    std::fprintf(stderr, "ferry-runc: %s\n", what.c_str());
}

std::string real_runc() {
    const fs::path self = fs::read_symlink("/proc/self/exe");
    for (const char* c :
         {"/usr/sbin/runc", "/usr/bin/runc", "/usr/local/sbin/runc", "/usr/local/bin/runc"}) {
        std::error_code ec;
        if (fs::exists(c, ec) && fs::canonical(c, ec) != self)
            return c;
    }
    say("cannot find runc");
    std::exit(127);
}

// The value of `--name VALUE` or `--name=VALUE` in args.
std::optional<std::string> option_value(const std::vector<std::string>& args,
                                        const std::string& name) {
    for (size_t i = 0; i < args.size(); i++) {
        if (args[i] == name && i + 1 < args.size())
            return args[i + 1];
        if (args[i].rfind(name + "=", 0) == 0)
            return args[i].substr(name.size() + 1);
    }
    return std::nullopt;
}

// runc's global options that take a value; the first other non-option
// argument is the command.
size_t command_index(const std::vector<std::string>& args) {
    for (size_t i = 0; i < args.size(); i++) {
        const auto& a = args[i];
        if (a == "--log" || a == "--log-format" || a == "--root" || a == "--criu" ||
            a == "--rootless") {
            i++;
            continue;
        }
        if (a.rfind("-", 0) != 0)
            return i;
    }
    return args.size();
}

// What CRIU, started by runc, inherits: the migration id (for Ferry's CRIU
// plugin) and the per-migration CRIU config.
// runc passes its environment on to CRIU. CRIU_FAULT=130 (the request's
// criu_env, already checked against engines::criu_env_allowed) makes CRIU step
// through syscalls where hardware breakpoints do not trap.
void export_for_criu(const std::string& migration_id, const std::string& criu_config,
                     const std::vector<std::string>& criu_env) {
    ::setenv("FERRY_MIGRATION_ID", migration_id.c_str(), 1);
    if (!criu_config.empty())
        ::setenv("CRIU_CONFIG_FILE", criu_config.c_str(), 1);
    for (const auto& e : criu_env) {
        const auto eq = e.find('=');
        if (eq != std::string::npos && engines::criu_env_allowed(e))
            ::setenv(e.substr(0, eq).c_str(), e.substr(eq + 1).c_str(), 1);
    }
}

// runc's last argument is the container id for every command Ferry changes.
// A request whose migrator is gone is stale: the command runs plain.
std::optional<engines::checkpoint_request>
pending_checkpoint(const std::vector<std::string>& args) {
    if (args.empty() || !engines::is_container_id(args.back()))
        return std::nullopt;
    auto req = engines::read_checkpoint_request(engines::checkpoint_request_path(args.back()));
    if (req && ::kill(req->migrator_pid, 0) != 0) {
        say("ignoring a stale Ferry request (its migrator is gone)");
        return std::nullopt;
    }
    return req;
}

// Docker pauses the container (runc pause) before it has runc checkpoint
// it, and resumes it afterwards. For a Ferry migration the pause is skipped:
// runc's CRIU freezes the container's cgroup itself as its dump starts, and
// the ~45 ms that containerd and runc's start-up take in between would
// otherwise be downtime (moby's checkpoint takes nothing of the container
// under the pause: no rootfs snapshot, no image). The resume containerd
// sends afterwards, or when the checkpoint fails, is skipped the same way,
// so docker's record says what is true. A marker beside the request says
// that the pause was skipped; a pause Ferry did not ask for drops a marker
// left behind, so that its resume is never skipped. Returns the command's
// exit status, or nothing when runc must run it.
std::optional<int> skipped_pause(const std::string& command, const std::vector<std::string>& args) {
    if (args.empty() || !engines::is_container_id(args.back()))
        return std::nullopt;
    const fs::path marker =
        engines::checkpoint_request_path(args.back()).string() + ".pause-skipped";
    std::error_code ec;
    if (command == "resume")
        return fs::remove(marker, ec) ? std::optional<int>(0) : std::nullopt;
    std::optional<engines::checkpoint_request> req;
    try {
        req = pending_checkpoint(args);
    } catch (const std::exception& e) {
        say(e.what());
    }
    if (!req) {
        fs::remove(marker, ec);
        return std::nullopt;
    }
    std::ofstream out(marker);
    out << req->migration_id << "\n";
    out.close();
    if (!out) {
        // runc pauses it: the downtime starts now, and the migrator is told.
        say("cannot write " + marker.string() + ": the container is paused");
        criu_events::report(req->migration_id, "engine-pause", 0);
        return std::nullopt;
    }
    return 0;
}

// Asks `path` and throws unless the answer is "go".
void wait_for_go(const std::string& path, const std::string& line, std::chrono::milliseconds bound,
                 const std::string& what) {
    const auto answer = engines::ask_line(path, line, bound);
    if (answer != engines::go_answer)
        throw std::runtime_error(what + ": " + (answer.empty() ? "no answer" : answer));
}

// What runc's checkpoint writes as descriptors.json, for the hold (a warm
// restore's runc reads it before its CRIU starts, so before the images arrive).
std::string external_descriptors(const std::vector<std::string>& args) {
    return engines::runc_external_descriptors(option_value(args, "--root").value_or("/run/runc"),
                                              args.back());
}

void set_option(std::vector<std::string>& args, size_t cmd, const std::string& name,
                const std::string& value) {
    for (size_t i = cmd + 1; i < args.size(); i++) {
        if (args[i] == name && i + 1 < args.size()) {
            args[i + 1] = value;
            return;
        }
        if (args[i].rfind(name + "=", 0) == 0) {
            args[i] = name + "=" + value;
            return;
        }
    }
    args.insert(args.begin() + long(cmd) + 1, {name, value});
}

void lazy_checkpoint(std::vector<std::string>& args, size_t cmd) {
    auto req = pending_checkpoint(args);
    if (!req)
        return;
    // Nothing is frozen yet: a refusal fails the checkpoint, and the
    // container runs on.
    if (!req->hold_socket.empty())
        wait_for_go(req->hold_socket,
                    std::string(engines::hold_request) + " " + external_descriptors(args),
                    hold_timeout, "the migrator did not let the checkpoint go on");
    if (!req->images_dir.empty()) {
        // CRIU's logs go with the images, where Ferry keeps them.
        set_option(args, cmd, "--image-path", req->images_dir);
        set_option(args, cmd, "--work-path", req->images_dir);
    }
    const int fd = ::open(req->status_fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd < 0)
        throw std::runtime_error("cannot open the migrator's status fifo " + req->status_fifo +
                                 ": " + std::strerror(errno));
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    const std::vector<std::string> lazy = {"--lazy-pages", "--page-server",
                                           "127.0.0.1:" + std::to_string(req->page_server_port),
                                           "--status-fd", std::to_string(fd)};
    args.insert(args.begin() + long(cmd) + 1, lazy.begin(), lazy.end());
    if (req->tcp_established &&
        std::find(args.begin(), args.end(), "--tcp-established") == args.end())
        args.insert(args.begin() + long(cmd) + 1, "--tcp-established");
    export_for_criu(req->migration_id, req->criu_config, req->criu_env);
}

// Unpacks `tar` into `dir` with ferry-untar, beside this binary (bounded:
// the restore it is part of must not hang on it).
void untar(const std::string& tar, const fs::path& dir) {
    const fs::path helper = fs::read_symlink("/proc/self/exe").parent_path() / "ferry-untar";
    try {
        (void)run_capture({helper.string(), tar, dir.string()}, untar_timeout);
    } catch (const std::exception& e) {
        throw std::runtime_error("ferry-untar could not refill the container's /dev/shm from " +
                                 tar + ": " + e.what());
    }
}

// The container's /dev/shm is a tmpfs the engine mounted on the host for it
// (the bundle's config.json names its source); its files go back there.
void restore_devshm(const fs::path& bundle, const std::string& tar) {
    std::ifstream in(bundle / "config.json");
    const auto spec = nlohmann::json::parse(in);
    for (const auto& m : spec.value("mounts", nlohmann::json::array())) {
        if (m.value("destination", "") != "/dev/shm")
            continue;
        const fs::path source = m.value("source", "");
        if (fs::is_directory(source)) {
            untar(tar, source);
            return;
        }
    }
    throw std::runtime_error("the container's /dev/shm has no host directory to restore into");
}

// Docker's network namespace is made and configured now, not by runc and
// its hook at CRIU's setup-namespaces (network_hook.hpp): for a warm
// restore that is before the freeze. The source's dump marked the namespace
// external for the same config.json. A failure fails the restore.
void set_up_network_early(const fs::path& bundle, const std::string& id) {
    std::ifstream in(bundle / "config.json");
    if (!engines::network_set_up_by_hook(nlohmann::json::parse(in)))
        return;
    const auto path = engines::set_up_network_before_restore(bundle, id, network_hook_timeout);
    say("the container's network is set up before its restore, at " + path.string());
}

void lazy_restore(std::vector<std::string>& args, size_t cmd) {
    const auto images = option_value(args, "--image-path");
    if (!images)
        return;
    auto req = engines::read_restore_request(fs::path(*images) / engines::restore_request_file);
    if (!req)
        return;
    const fs::path bundle = fs::absolute(option_value(args, "--bundle").value_or("."));
    set_up_network_early(bundle, args.back());
    // The spec as runc restores it: read after docker's network hook left it.
    const auto spec = [&] {
        std::ifstream in(bundle / "config.json");
        return nlohmann::json::parse(in, nullptr, false);
    }();
    // runc acts at setup-namespaces only to run the bundle's hooks
    // (engine_request.hpp).
    if (!req->criu_config.empty() && !engines::runc_runs_hooks_in_restore(spec))
        engines::narrow_criu_config(req->criu_config, engines::rpc_notify_option,
                                    engines::rpc_notify_runc_without_hooks);
    // CRIU connects to lazy-pages.socket in its work dir: Ferry's session
    // dir, where lazy-pages listens and where CRIU's restore.log then stays
    // for the post-mortem (engines remove their own work dirs).
    set_option(args, cmd, "--work-path", fs::path(req->lazy_socket).parent_path().string());
    args.insert(args.begin() + long(cmd) + 1, "--lazy-pages");
    if (req->tcp_established) {
        args.insert(args.begin() + long(cmd) + 1, "--tcp-established");
        // The daemon gives the copy the source's addresses at setup-namespaces
        // only if runc makes its namespace then; otherwise before CRIU starts.
        if (!spec.is_object())
            throw std::runtime_error("cannot read " + (bundle / "config.json").string());
        if (engines::network_namespace_made_in_restore(spec))
            ::setenv("FERRY_NETWORK_MOVES", "1", 1); // for ferry-criu-action
        else if (!req->criu_config.empty())
            engines::criu_config_gate_only(req->criu_config);
    }
    ::setenv("FERRY_GATE", req->gate_socket.c_str(), 1);
    export_for_criu(req->migration_id, req->criu_config, req->criu_env);
    if (!req->wait_for_images) {
        if (!req->devshm_tar.empty())
            restore_devshm(bundle, req->devshm_tar);
        return;
    }
    // A warm restore: runc starts now, before the source's freeze, and
    // runs this binary as its criu (criu_after_images), which lets the real
    // CRIU start once the images are in images_dir.
    set_option(args, cmd, "--image-path", req->images_dir);
    std::string real_criu = "criu";
    for (size_t i = 0; i + 1 < cmd; i++)
        if (args[i] == "--criu") {
            real_criu = args[i + 1];
            args.erase(args.begin() + long(i), args.begin() + long(i) + 2);
            break;
        }
    ::setenv("FERRY_WARM_GATE", req->gate_socket.c_str(), 1);
    ::setenv("FERRY_WARM_BUNDLE", bundle.c_str(), 1);
    ::setenv("FERRY_WARM_DEVSHM", req->devshm_tar.c_str(), 1);
    ::setenv("FERRY_REAL_CRIU", real_criu.c_str(), 1);
    if (req->criu_waits)
        ::setenv("FERRY_WARM_CRIU_WAITS", "1", 1);
    const auto self = fs::read_symlink("/proc/self/exe").string();
    args.insert(args.begin(), {"--criu", self}); // a global option: before the command
}

// What a warm restore waits for before CRIU reads the images: the gate's
// "go" (the images are in), then the container's /dev/shm refilled. A
// CRIU that waits itself is told of the early mount images on the way
// (`on_mounts`: the gate's "mounts" note).
void wait_for_images(const std::string& gate, const fs::path& bundle, const std::string& devshm,
                     const std::function<void()>& on_mounts = {}) {
    const auto answer = engines::ask_line_after_notes(
        gate, std::string(engines::gate_images) + " " + bundle.string(), images_timeout,
        on_mounts ? engines::mounts_early_note : "", on_mounts);
    if (answer != engines::go_answer)
        throw std::runtime_error("the destination daemon did not let the restore go on: " +
                                 (answer.empty() ? std::string("no answer") : answer));
    // Docker's source sends none when its /dev/shm was empty.
    std::error_code ec;
    if (!devshm.empty() && fs::exists(devshm, ec))
        restore_devshm(bundle, devshm);
}

// With criu-patches/0015 the real CRIU starts at once and reads one byte
// from the returned fd before it touches the images (--restore-wait-fd):
// its exec, its libraries and its set-up (~4 ms here) then happen before
// the freeze, not after the images. A grandchild of this process waits for
// them and writes that byte, or exits without it, and CRIU calls the
// restore off. A grandchild, so that CRIU (what this process becomes) never
// reaps it as an unknown child; it keeps no other descriptor of runc's, so
// that runc never waits on it for CRIU's socket or pipes to close.
int let_criu_wait_for_images(const std::string& gate, const fs::path& bundle,
                             const std::string& devshm) {
    int p[2];
    if (::pipe(p))
        throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    const pid_t child = ::fork();
    if (child < 0)
        throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (child == 0) {
        ::close(p[0]);
        if (::fork() != 0)
            ::_exit(0); // the grandchild goes on (none: CRIU reads EOF)
        ::signal(SIGPIPE, SIG_IGN);
        const int w = p[1];
        ::close_range(3, unsigned(w) - 1, 0);
        ::close_range(unsigned(w) + 1, ~0U, 0);
        // Nor runc's stdin and stdout (CRIU's, which may be the container's
        // stdio): stderr stays, for the reason the gate gives.
        if (const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC); null >= 0) {
            ::dup2(null, 0);
            ::dup2(null, 1);
            if (null > 2)
                ::close(null);
        }
        int rc = 1;
        try {
            // 'm': the early mount images are in <images>/mnt-early
            // (criu-patches/0030); CRIU builds the mount tree, then waits on.
            wait_for_images(gate, bundle, devshm, [w] {
                const char mounts = 'm';
                if (::write(w, &mounts, 1) != 1)
                    throw std::runtime_error("the waiting CRIU went away");
            });
            const char go = 'g';
            rc = ::write(w, &go, 1) == 1 ? 0 : 1;
        } catch (const std::exception& e) {
            say(e.what());
        }
        ::_exit(rc);
    }
    ::close(p[1]);
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    return p[0];
}

// As runc's criu in a warm restore: `criu swrk FD`, where runc's first
// request on FD says what it wants. Its version query passes at once; its
// restore waits at the gate until the images are in, refills /dev/shm, and
// only then becomes the real CRIU, which reads them from its first step.
// With a CRIU that can wait itself, the real CRIU starts at once instead.
int criu_after_images(int argc, char** argv) {
    const char* real = std::getenv("FERRY_REAL_CRIU");
    const std::string gate = std::getenv("FERRY_WARM_GATE");
    const fs::path bundle =
        std::getenv("FERRY_WARM_BUNDLE") ? std::getenv("FERRY_WARM_BUNDLE") : "";
    const std::string devshm =
        std::getenv("FERRY_WARM_DEVSHM") ? std::getenv("FERRY_WARM_DEVSHM") : "";
    const bool criu_waits = std::getenv("FERRY_WARM_CRIU_WAITS") != nullptr;
    for (const char* name : {"FERRY_WARM_GATE", "FERRY_WARM_BUNDLE", "FERRY_WARM_DEVSHM",
                             "FERRY_REAL_CRIU", "FERRY_WARM_CRIU_WAITS"})
        ::unsetenv(name);
    std::vector<std::string> wait_option;
    try {
        if (argc >= 3 && std::string(argv[1]) == "swrk") {
            const int fd = std::atoi(argv[2]);
            pollfd p{fd, POLLIN, 0};
            uint8_t head[2] = {};
            // CriuReq starts with its type (field 1): 0x08, then RESTORE = 2.
            if (::poll(&p, 1, 60'000) == 1 && ::recv(fd, head, sizeof head, MSG_PEEK) == 2 &&
                head[0] == 0x08 && head[1] == 2) {
                if (criu_waits)
                    wait_option = {"--restore-wait-fd",
                                   std::to_string(let_criu_wait_for_images(gate, bundle, devshm))};
                else
                    wait_for_images(gate, bundle, devshm);
            }
        }
    } catch (const std::exception& e) {
        say(e.what());
        return 1; // runc's restore fails: nothing was restored
    }
    const std::string criu = real && *real ? real : "criu";
    std::vector<char*> cargv = {const_cast<char*>(criu.c_str())};
    for (auto& o : wait_option) // options go before the mode
        cargv.push_back(o.data());
    for (int i = 1; i < argc; i++)
        cargv.push_back(argv[i]);
    cargv.push_back(nullptr);
    ::execvp(criu.c_str(), cargv.data());
    say("exec " + criu + ": " + std::strerror(errno));
    return 127;
}

} // namespace

int main(int argc, char** argv) {
    if (std::getenv("FERRY_WARM_GATE") && std::getenv("FERRY_REAL_CRIU"))
        return criu_after_images(argc, argv);
    std::vector<std::string> args(argv + 1, argv + argc);
    // Ferry's options go after the command, so its index stays valid.
    const size_t cmd = command_index(args);
    const std::string command = cmd < args.size() ? args[cmd] : "";
    try {
        if (command == "checkpoint")
            lazy_checkpoint(args, cmd);
        else if (command == "restore")
            lazy_restore(args, cmd);
    } catch (const std::exception& e) {
        // A request Ferry cannot honour must fail the command: a plain
        // checkpoint would stop the container, not migrate it.
        say(e.what());
        return 1;
    }
    const std::string runc = real_runc();
    std::vector<char*> cargv = {const_cast<char*>(runc.c_str())};
    for (auto& a : args)
        cargv.push_back(a.data());
    cargv.push_back(nullptr);
    if (command == "pause" || command == "resume")
        if (auto status = skipped_pause(command, args))
            return *status;
    ::execv(runc.c_str(), cargv.data());
    say("exec " + runc + ": " + std::strerror(errno));
    return 127;
}
