#include "engine_restore.hpp"

#include "criu_image.hpp"
#include "engine_request.hpp"
#include "error.hpp"
#include "log.hpp"
#include "proc.hpp"
#include "subprocess.hpp"
#include "tar_writer.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>
#include <fstream>

namespace ferry::pagesrv::engine_restore {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr auto query_timeout = std::chrono::seconds(30);

// The shim, which CRIU runs as its action script: $FERRY_RUNC_SHIM, beside
// pagesrv once installed, or in the build tree.
std::string shim_binary() {
    if (const char* env = std::getenv("FERRY_RUNC_SHIM"); env && *env)
        return env;
    for (auto candidate :
         {proc::self_dir() / "ferry-runc", proc::self_dir() / ".." / "migrator" / "ferry-runc"})
        if (fs::exists(candidate))
            return fs::canonical(candidate).string();
    throw error("cannot find ferry-runc (set FERRY_RUNC_SHIM)");
}

std::string local_image_id(const std::string& name) {
    try {
        auto out =
            run_capture({engine::podman_binary(), "image", "inspect", "--format", "{{.Id}}", name},
                        query_timeout);
        return out.substr(0, out.find('\n'));
    } catch (const std::exception&) {
        throw error(fmt::format(
            "this host has no image '{}': build or load it here first (podman restores a "
            "container on top of its image)",
            name));
    }
}

std::vector<uint8_t> patched_config(const std::vector<uint8_t>& raw) {
    json c;
    try {
        c = json::parse(raw);
    } catch (const std::exception& e) {
        throw error(fmt::format("podman's config.dump is malformed: {}", e.what()));
    }
    const std::string image = c.value("rootfsImageName", "");
    if (image.empty())
        throw error("config.dump names no image (containers from a rootfs are not supported)");
    c["rootfsImageID"] = local_image_id(image);
    // Paths of the source host's container directories: podman makes its
    // own for the new container when they are empty.
    const std::string old_id = c.value("id", "");
    for (const char* key : {"conmonPidFile", "pid_file", "logPath"})
        if (c.contains(key) && c[key].is_string() && !old_id.empty() &&
            c[key].get<std::string>().find(old_id) != std::string::npos)
            c[key] = "";
    const auto text = c.dump();
    return {text.begin(), text.end()};
}

sockaddr_un gate_address(const fs::path& dir) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const auto p = gate_path(dir).string();
    if (p.size() >= sizeof addr.sun_path)
        throw error(fmt::format("gate socket path {} is too long for a unix socket", p));
    std::strcpy(addr.sun_path, p.c_str());
    return addr;
}

} // namespace

void check_engine(const std::string& engine, const std::string& container_name) {
    if (engine != "podman")
        throw error(fmt::format("engine '{}' is not supported here (podman is)", engine));
    if (container_name.empty() || container_name.size() > 200 ||
        container_name.find_first_not_of(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") !=
            std::string::npos)
        throw error(fmt::format("'{}' is not a container name", container_name));
}

void check_name_free(const std::string& container_name) {
    bool exists = true;
    try {
        (void)run_capture({engine::podman_binary(), "container", "exists", container_name},
                          query_timeout);
    } catch (const std::exception&) {
        exists = false; // exit status 1: no such container
    }
    if (exists)
        throw error(fmt::format("a container named '{}' already exists on the destination",
                                container_name));
}

void build_podman_import(const fs::path& dir, const std::string& migration_id,
                         const fs::path& tar_out) {
    const std::string prefix = engine_file_prefix;
    if (!fs::exists(dir / (prefix + "config.dump")) || !fs::exists(dir / (prefix + "spec.dump")))
        throw error("the migrator sent no podman config.dump/spec.dump");
    tar_writer tar(tar_out);
    for (const auto& entry : fs::directory_iterator(dir)) {
        const auto name = entry.path().filename().string();
        if (!entry.is_regular_file() || entry.path().extension() == ".log" ||
            entry.path().extension() == ".conf" || entry.path() == tar_out)
            continue;
        if (name.rfind(prefix, 0) == 0) {
            const auto engine_name = name.substr(prefix.size());
            auto data = criu::read_file(entry.path());
            if (engine_name == "config.dump")
                data = patched_config(data);
            tar.add_bytes(engine_name, data);
        } else {
            tar.add_path("checkpoint/" + name, entry.path());
        }
    }
    engine::restore_request req;
    req.migration_id = migration_id;
    req.lazy_socket = (dir / "lazy-pages.socket").string();
    req.gate_socket = gate_path(dir).string();
    req.criu_config = (dir / "criu-restore.conf").string();
    engine::write_criu_config(dir / "criu-restore.conf",
                              fmt::format("action-script {}\n", shim_binary()));
    engine::write_request(dir / engine::restore_request_file, req);
    tar.add_path(std::string("checkpoint/") + engine::restore_request_file,
                 dir / engine::restore_request_file);
    tar.close();
}

fs::path gate_path(const fs::path& dir) {
    return dir / "gate.socket";
}

unique_fd listen_gate(const fs::path& dir) {
    unique_fd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!s)
        throw sys_error("socket AF_UNIX");
    const auto addr = gate_address(dir);
    ::unlink(addr.sun_path);
    if (::bind(s.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) ||
        ::listen(s.get(), 4))
        throw sys_error("gate socket " + gate_path(dir).string());
    return s;
}

pid_t read_gate_request(int conn) {
    std::string line;
    char c;
    while (line.size() < 128) {
        pollfd p{conn, POLLIN, 0};
        if (::poll(&p, 1, 5000) <= 0)
            throw error("the runc shim sent no gate request");
        if (::read(conn, &c, 1) != 1 || c == '\n')
            break;
        line += c;
    }
    const std::string want = "post-restore ";
    if (line.rfind(want, 0) != 0)
        throw error(fmt::format("malformed gate request '{}'", line));
    try {
        return pid_t(std::stol(line.substr(want.size())));
    } catch (const std::exception&) {
        throw error(fmt::format("malformed gate request '{}'", line));
    }
}

void answer_gate(int conn, bool resume, const std::string& reason) {
    const std::string a =
        resume ? std::string(engine::gate_resume) + "\n" : fmt::format("refuse {}\n", reason);
    (void)!::write(conn, a.data(), a.size());
}

std::vector<std::string> podman_restore_command(const fs::path& tar,
                                                const std::string& container_name) {
    // --name gives the container a new id: the old one may still be known
    // to a runc root this host shares with the source (as the testbed does).
    return {engine::podman_binary(), "container", "restore", "--import", tar.string(), "--name",
            container_name};
}

void remove_container(const std::string& container_name) {
    try {
        engine::podman_remove(container_name);
    } catch (const std::exception& e) {
        make_logger("pagesrv")->warn("cannot remove container {}: {}", container_name, e.what());
    }
}

pid_t container_pid(const std::string& container_name) {
    try {
        auto out = run_capture({engine::podman_binary(), "container", "inspect", "--format",
                                "{{.State.Pid}}", container_name},
                               query_timeout);
        return pid_t(std::stol(out));
    } catch (const std::exception&) {
        return 0;
    }
}

} // namespace ferry::pagesrv::engine_restore
