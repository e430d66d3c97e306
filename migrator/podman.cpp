#include "podman.hpp"

#include "clock.hpp"
#include "criu_image.hpp"
#include "engine_request.hpp"
#include "error.hpp"
#include "log.hpp"
#include "subprocess.hpp"
#include "tar_writer.hpp"
#include "unique_fd.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <set>

namespace ferry::migrator::podman {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr auto query_timeout = std::chrono::seconds(30);

std::vector<fs::path> split_lower(const std::string& s) {
    std::vector<fs::path> out;
    size_t start = 0;
    while (start <= s.size()) {
        const size_t end = s.find(':', start);
        const auto part =
            s.substr(start, end == std::string::npos ? std::string::npos : end - start);
        if (!part.empty())
            out.emplace_back(part);
        if (end == std::string::npos)
            break;
        start = end + 1;
    }
    return out;
}

// Paths podman creates in every container (mount points, /etc/mtab ->
// /proc/mounts); its own diffs leave them out, and its restore refuses a
// symlink that points out of the rootfs.
bool podman_init_path(const std::string& rel) {
    static const std::set<std::string> paths = {
        "dev",        "etc/hostname", "etc/hosts",         "etc/resolv.conf", "proc", "run",
        "run/notify", "run/secrets",  "run/.containerenv", "run/podman-init", "sys",  "etc/mtab"};
    return paths.count(rel) != 0;
}

bool is_whiteout(const struct stat& st) {
    return S_ISCHR(st.st_mode) && major(st.st_rdev) == 0 && minor(st.st_rdev) == 0;
}

bool is_opaque(const fs::path& dir) {
    char v[4] = {};
    for (const char* name : {"trusted.overlay.opaque", "user.overlay.opaque"})
        if (::lgetxattr(dir.c_str(), name, v, sizeof v) > 0 && v[0] == 'y')
            return true;
    return false;
}

std::vector<uint8_t> bytes_of(const std::string& s) {
    return {s.begin(), s.end()};
}

} // namespace

container inspect(const std::string& name) {
    std::string out;
    try {
        out = run_capture({engine::podman_binary(), "container", "inspect", name}, query_timeout);
    } catch (const std::exception& e) {
        throw error(fmt::format("podman has no container '{}' ({})", name, e.what()));
    }
    json j;
    try {
        j = json::parse(out).at(0);
        container c;
        c.id = j.at("Id").get<std::string>();
        c.name = j.at("Name").get<std::string>();
        c.pid = j.at("State").at("Pid").get<pid_t>();
        c.running = j.at("State").at("Running").get<bool>();
        c.bundle = j.at("StaticDir").get<std::string>();
        c.runtime = j.value("OCIRuntime", "");
        const auto& data = j.at("GraphDriver").at("Data");
        if (j.at("GraphDriver").at("Name").get<std::string>() != "overlay")
            throw error("only podman's overlay storage driver is supported");
        c.upper_dir = data.at("UpperDir").get<std::string>();
        if (data.contains("LowerDir"))
            c.lower_dirs = split_lower(data.at("LowerDir").get<std::string>());
        return c;
    } catch (const ferry::error&) {
        throw;
    } catch (const std::exception& e) {
        throw error(fmt::format("cannot read podman's description of '{}': {}", name, e.what()));
    }
}

void require_ferry_runtime() {
    const auto out = run_capture(
        {engine::podman_binary(), "info", "--format", "{{.Host.OCIRuntime.Path}}"}, query_timeout);
    const fs::path path = out.substr(0, out.find('\n'));
    if (path.filename() != "ferry-runc")
        throw error(fmt::format("podman runs containers with {}, not Ferry's runc shim; add\n"
                                "  [engine.runtimes]\n  runc = [\"/path/to/ferry-runc\"]\n"
                                "to containers.conf (examples/setup.sh installs it)",
                                path.string()));
}

void write_rootfs_diff(const container& c, const fs::path& tar_out,
                       std::vector<std::string>& deleted) {
    tar_writer tar(tar_out);
    auto it = fs::recursive_directory_iterator(c.upper_dir);
    for (; it != fs::recursive_directory_iterator(); ++it) {
        const auto rel = it->path().lexically_relative(c.upper_dir).string();
        if (podman_init_path(rel))
            continue;
        struct stat st {};
        if (::lstat(it->path().c_str(), &st))
            throw sys_error("lstat " + it->path().string());
        if (is_whiteout(st)) {
            deleted.push_back("/" + rel);
            continue;
        }
        if (S_ISSOCK(st.st_mode))
            continue; // the process that bound it recreates it (CRIU rebinds)
        if (S_ISDIR(st.st_mode) && is_opaque(it->path())) {
            // An opaque directory hides everything below it in the image.
            std::set<std::string> hidden;
            for (const auto& lower : c.lower_dirs) {
                std::error_code ec;
                for (const auto& e : fs::directory_iterator(lower / rel, ec))
                    hidden.insert(e.path().filename().string());
                if (is_opaque(lower / rel))
                    break;
            }
            for (const auto& h : hidden)
                if (!fs::exists(fs::symlink_status(it->path() / h)))
                    deleted.push_back("/" + rel + "/" + h);
        }
        tar.add_path(rel, it->path());
    }
    tar.close();
}

namespace {

class podman_dump final : public dump_driver {
  public:
    podman_dump(container c, fs::path dir, std::string id)
        : _c(std::move(c)), _dir(std::move(dir)), _id(std::move(id)),
          _log(make_logger("migrator")) {}

    ~podman_dump() override {
        std::error_code ec;
        fs::remove(request_path(), ec);
        if (_podman.running()) {
            // Only reached when the migration could neither finish nor abort.
            _log->error("podman's checkpoint of {} is still running; leaving it", _c.name);
            _podman.detach();
        }
    }

    void start(uint16_t port) override {
        const auto fifo = _dir / "status.fifo";
        if (::mkfifo(fifo.c_str(), 0600))
            throw sys_error("mkfifo " + fifo.string());
        _status.reset(::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
        if (!_status)
            throw sys_error("open " + fifo.string());
        engine::checkpoint_request req;
        req.migration_id = _id;
        req.migrator_pid = ::getpid();
        req.page_server_port = port;
        req.status_fifo = fifo.string();
        req.criu_config = engine::write_criu_config(_dir / "criu-dump.conf").string();
        engine::write_request(request_path(), req);
        _t_start = monotonic_ns();
        // The export's rootfs and volumes are never used: Ferry ships the
        // writable layer itself, during the freeze.
        _podman = child_process::spawn({engine::podman_binary(), "container", "checkpoint",
                                        "--export", (_dir / "podman-export.tar").string(),
                                        "--ignore-rootfs", "--ignore-volumes", _c.id},
                                       _dir / "podman-checkpoint.log");
    }

    void wait_dumped(migration_result& r) override {
        // The freeze starts right after podman hands over to runc; Ferry
        // only sees podman start, so this over-states the freeze slightly.
        r.t_freeze = _t_start;
        wait_status(std::chrono::minutes(5));
        r.t_dumped = monotonic_ns();
    }

    fs::path images_dir() const override { return _c.bundle / "checkpoint"; }

    std::vector<engine_file> engine_files() override {
        std::vector<engine_file> files;
        for (const char* name : {"config.dump", "spec.dump", "network.status"}) {
            const auto p = _c.bundle / name;
            if (fs::exists(p))
                files.push_back({name, criu::read_file(p)});
            else if (std::string(name) != "network.status")
                throw error(fmt::format("podman did not write {}", p.string()));
        }
        std::vector<std::string> deleted;
        write_rootfs_diff(_c, _dir / "rootfs-diff.tar", deleted);
        files.push_back({"rootfs-diff.tar", criu::read_file(_dir / "rootfs-diff.tar")});
        files.push_back({"deleted.files", bytes_of(json(deleted).dump())});
        // The container's own /dev/shm (a tmpfs podman mounts per container).
        const auto config = json::parse(files[0].data);
        const fs::path shm = config.value("ShmDir", "");
        if (!shm.empty() && fs::is_directory(shm)) {
            tar_writer t(_dir / "devshm-checkpoint.tar");
            t.add_tree("", shm);
            t.close();
            files.push_back(
                {"devshm-checkpoint.tar", criu::read_file(_dir / "devshm-checkpoint.tar")});
        }
        return files;
    }

    int event_fd() const override { return _podman.running() ? _podman.exit_fd() : -1; }

    void on_event() override {
        if (auto st = _podman.wait_for(std::chrono::milliseconds(0))) {
            _ended = true;
            _end_error = fmt::format("podman's checkpoint ended early ({}): {}",
                                     describe_wait_status(*st), _podman.log_tail());
            throw error(_end_error);
        }
    }

    void wait_page_server() override { wait_status(std::chrono::seconds(30)); }

    bool wait_end(std::chrono::seconds timeout) override {
        if (!_podman.running())
            return _succeeded;
        auto st = _podman.wait_for(timeout);
        if (!st) {
            _end_error = "podman's checkpoint did not end in time";
            return false;
        }
        _ended = true;
        _succeeded = WIFEXITED(*st) && WEXITSTATUS(*st) == 0;
        if (!_succeeded)
            _end_error = fmt::format("podman checkpoint: {}: {}", describe_wait_status(*st),
                                     _podman.log_tail());
        return _succeeded;
    }

    std::string end_error() const override { return _end_error; }
    bool ended() const override { return _ended; }

    void kill() noexcept override {
        // CRIU runs under runc under podman; stopping podman does not stop
        // it. What is left frozen needs a person: say where.
        _log->error("cannot end the lazy dump of {}: see {} and runc's dump.log in {}", _c.name,
                    _podman.log().string(), _c.bundle.string());
    }

    bool remove_source() override {
        std::error_code ec;
        fs::remove(_dir / "podman-export.tar", ec);
        try {
            engine::podman_remove(_c.id);
            return true;
        } catch (const std::exception& e) {
            _log->warn("cannot remove the source container {}: {}", _c.name, e.what());
            return false;
        }
    }

  private:
    fs::path request_path() const { return _c.bundle / engine::checkpoint_request_file; }

    // Until runc's status byte (CRIU's page server listens, every image is
    // written) or podman's end.
    void wait_status(std::chrono::milliseconds timeout) {
        if (_status_ready)
            return;
        const auto until = std::chrono::steady_clock::now() + timeout;
        for (;;) {
            if (!_podman.running() || _ended)
                throw error(_end_error.empty() ? "podman's checkpoint is over" : _end_error);
            pollfd fds[2] = {{_status.get(), POLLIN, 0}, {_podman.exit_fd(), POLLIN, 0}};
            if (::poll(fds, 2, 100) < 0 && errno != EINTR)
                throw sys_error("poll");
            if (fds[0].revents & POLLIN) {
                char b = 1;
                if (::read(_status.get(), &b, 1) == 1) {
                    _status_ready = true;
                    return;
                }
            }
            if (fds[1].revents)
                on_event(); // throws: podman ended without a lazy dump
            if (std::chrono::steady_clock::now() > until)
                throw error(
                    fmt::format("podman's checkpoint of {} did not freeze it in time", _c.name));
        }
    }

    container _c;
    fs::path _dir;
    std::string _id;
    std::shared_ptr<spdlog::logger> _log;
    unique_fd _status;
    child_process _podman;
    uint64_t _t_start = 0;
    bool _status_ready = false;
    bool _ended = false;
    bool _succeeded = false;
    std::string _end_error;
};

} // namespace

std::unique_ptr<dump_driver> make_dump(const container& c, const fs::path& dir,
                                       const std::string& migration_id) {
    return std::make_unique<podman_dump>(c, dir, migration_id);
}

} // namespace ferry::migrator::podman
