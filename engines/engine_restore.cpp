#include "engine_restore.hpp"

#include "core/error.hpp"
#include "core/log.hpp"
#include "criu/cgroup_yard.hpp"
#include "criu/criu_config.hpp"
#include "criu/criu_features.hpp"
#include "criu/criu_image.hpp"
#include "engine.hpp"
#include "engine_request.hpp"
#include "line_socket.hpp"
#include "sys/proc.hpp"
#include "tar_extract.hpp"

#include <nlohmann/json.hpp>

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

namespace ferry::engines {

namespace {

namespace fs = std::filesystem;

// CRIU's action script, installed beside the runc shim (engines/meson.build):
// at post-restore it asks the gate, and at setup-namespaces when the network
// moves (runc-shim/ferry_criu_action.c).
constexpr const char* criu_action_script = "ferry-criu-action";

fs::path action_script_for(const fs::path& runc_shim) {
    const auto beside = runc_shim.parent_path() / criu_action_script;
    std::error_code ec;
    if (!fs::exists(beside, ec))
        throw error(fmt::format("{} is missing beside the runc shim {}: without it no restore is "
                                "gated (install both)",
                                criu_action_script, runc_shim.string()));
    return beside;
}

} // namespace

std::unique_ptr<engine_restore> make_engine_restore(const std::string& engine,
                                                    const std::string& container_name,
                                                    const host_tools& tools) {
    if (container_name.empty() || container_name.size() > 200 ||
        container_name.find_first_not_of(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") !=
            std::string::npos)
        throw error(fmt::format("'{}' is not a container name", container_name));
    return find(engine).make_restore(container_name, tools);
}

void remove_stale_reservations(const fs::path& incoming_root, const host_tools& tools) noexcept {
    auto log = make_logger("pagesrv");
    std::error_code ec;
    for (const auto& session : fs::directory_iterator(incoming_root, ec)) {
        const auto file = session.path() / reservation_file;
        if (!fs::exists(file, ec))
            continue;
        try {
            std::ifstream in(file);
            const auto r = nlohmann::json::parse(in);
            const auto engine = r.at("engine").get<std::string>();
            const auto id = r.at("id").get<std::string>();
            const auto& e = find(engine);
            if (e.remove_if_never_started)
                e.remove_if_never_started(id, tools);
            if (e.remove_restore_leftovers)
                e.remove_restore_leftovers(session.path().filename().string());
            log->info("removed container {} ({}), created for migration {} that never ran",
                      r.value("name", ""), engine, session.path().filename().string());
        } catch (const std::exception& e) {
            log->warn("stale reservation {}: {}", file.string(), e.what());
        }
        fs::remove(file, ec);
    }
}

fs::path engine_restore::write_restore_request(const fs::path& dir, const fs::path& images,
                                               const std::string& migration_id,
                                               const std::string& devshm_tar,
                                               const std::vector<std::string>& criu_env,
                                               const host_tools& tools, bool warm) const {
    return engine_restore_detail::write_restore_request(dir, images, migration_id, devshm_tar,
                                                        criu_env, tools, warm, _connections_move,
                                                        _links_move);
}

namespace engine_restore_detail {

fs::path write_restore_request(const fs::path& dir, const fs::path& images,
                               const std::string& migration_id, const std::string& devshm_tar,
                               const std::vector<std::string>& criu_env, const host_tools& tools,
                               bool warm, bool tcp_established, bool links_move) {
    if (tools.runc_shim.empty())
        throw error("cannot find Ferry's runc shim ferry-runc (set FERRY_RUNC_SHIM)");
    engines::restore_request req;
    req.criu_env = criu_env;
    req.criu_env.push_back(engines::criu_log_level_env(tools.criu_log_level));
    req.migration_id = migration_id;
    req.lazy_socket = (dir / "lazy-pages.socket").string();
    req.gate_socket = gate_path(dir).string();
    req.criu_config = (dir / "criu-restore.conf").string();
    req.devshm_tar = devshm_tar;
    // A network that moves: the shim asks the gate before CRIU starts even
    // when the images are in, so that the daemon can give the copy the
    // source's addresses first (pagesrv/moving_network.cpp).
    req.wait_for_images = warm || tcp_established;
    req.tcp_established = tcp_established;
    if (req.wait_for_images) {
        req.images_dir = warm ? dir.string() : images.string();
        req.criu_waits = criu::supports_restore_wait(tools.criu);
    }
    // The action script acts at post-restore (the gate) and, when the
    // addresses move, at setup-namespaces (engine_request.hpp); CRIU runs
    // it only then where it can (criu-patches/0013): each other run is a
    // fork and an exec in the downtime (1-2.7 ms here).
    const std::string actions = tcp_established && links_move
                                    ? engines::script_actions_gate_and_network
                                    : engines::script_actions_gate;
    const bool only_then =
        criu::supports_option_value(tools.criu, engines::script_actions_option, actions);
    // Probed with a fixed path, so that the probe runs once per process.
    const bool asks_itself =
        only_then && criu::supports_option_value(tools.criu, engines::action_socket_option,
                                                 "/run/ferry/probe.socket");
    std::string callouts =
        asks_itself
            ? fmt::format("{} {}\n", engines::action_socket_option, req.gate_socket)
            : fmt::format("action-script {}\n", action_script_for(tools.runc_shim).string());
    if (only_then)
        callouts += fmt::format("{} {}\n", engines::script_actions_option, actions);
    // The shim narrows this to post-restore where the bundle has no hooks.
    if (criu::supports_option_value(tools.criu, engines::rpc_notify_option,
                                    engines::rpc_notify_runc))
        callouts += fmt::format("{} {}\n", engines::rpc_notify_option, engines::rpc_notify_runc);
    // runc records the restored process at post-restore (2.3-2.9 ms here,
    // inside the downtime): told as soon as nothing else can come first, it
    // does that while CRIU restores; its answer still comes before the gate.
    if (criu::supports_option(tools.criu, engines::rpc_post_restore_early_option))
        callouts += fmt::format("{}\n", engines::rpc_post_restore_early_option);
    callouts += criu::restore_feature_lines(tools.criu);
    // The host's cgroup mounts as CRIU's yard: CRIU mounts none of its own.
    criu::write_config(
        dir / "criu-restore.conf",
        fmt::format("{}{}{}", callouts,
                    tcp_established ? criu::restore_established_options : criu::restore_options,
                    criu::cgroup_yard_config_line(criu::host_cgroup_yard())),
        tools.criu_plugin_dir);
    const auto file = images / engines::restore_request_file;
    engines::write_request(file, req);
    return file;
}

fs::path engine_file(const fs::path& dir, const std::string& name) {
    const auto p = dir / (std::string(engine_file_prefix) + name);
    if (!fs::exists(p))
        throw error(fmt::format("the migrator sent no {}", name));
    return p;
}

std::vector<std::string> deleted_files(const fs::path& dir) {
    try {
        return nlohmann::json::parse(criu::read_file(engine_file(dir, "deleted.files")))
            .get<std::vector<std::string>>();
    } catch (const ferry::error&) {
        throw;
    } catch (const std::exception& e) {
        throw error(fmt::format("deleted.files is malformed: {}", e.what()));
    }
}

fs::path devshm_tar(const fs::path& dir) {
    return dir / (std::string(engine_file_prefix) + "devshm-checkpoint.tar");
}

bool is_criu_image(const fs::path& file) {
    const auto name = file.filename().string();
    const auto ext = file.extension();
    return name.rfind(engine_file_prefix, 0) != 0 && ext != ".log" && ext != ".conf" &&
           ext != ".tar" && ext != ".socket" && name != engines::restore_request_file;
}

fs::path mounted_root(const fs::path& bundle) {
    fs::path root;
    try {
        std::ifstream in(bundle / "config.json");
        root = nlohmann::json::parse(in).at("root").at("path").get<std::string>();
    } catch (const std::exception& e) {
        throw error(
            fmt::format("cannot read the root from {}/config.json: {}", bundle.string(), e.what()));
    }
    if (root.is_relative())
        root = bundle / root;
    if (!fs::is_directory(root))
        throw error(fmt::format("the engine mounted no root at {} (runc's bundle {})",
                                root.string(), bundle.string()));
    return root;
}

void apply_rootfs_diff_to_root(const fs::path& dir, const fs::path& root) {
    for (const auto& d : deleted_files(dir))
        remove_below(root, d);
    extract_tar(engine_file(dir, "rootfs-diff.tar"), root);
}

const criu::engine_file& sent_file(const std::vector<criu::engine_file>& files,
                                   const std::string& name) {
    for (const auto& f : files)
        if (f.name == name)
            return f;
    throw error(fmt::format("the source sent no {} to start from", name));
}

void write_runc_descriptors(const fs::path& dir, const std::vector<criu::engine_file>& files) {
    const auto& descriptors = sent_file(files, "descriptors.json");
    std::ofstream(dir / "descriptors.json", std::ios::binary)
        .write(reinterpret_cast<const char*>(descriptors.data.data()),
               std::streamsize(descriptors.data.size()));
}

} // namespace engine_restore_detail

fs::path gate_path(const fs::path& dir) {
    return dir / "gate.socket";
}

unique_fd listen_gate(const fs::path& dir) {
    return listen_unix(gate_path(dir));
}

gate_request read_gate_request(int conn) {
    std::string line;
    try {
        line = read_line(conn, std::chrono::seconds(5));
    } catch (const std::exception&) {
        throw error("the runc shim sent no gate request");
    }
    gate_request r;
    const std::string images = std::string(gate_images) + " /";
    if (line.rfind(images, 0) == 0) {
        r.images = true;
        r.bundle = line.substr(images.size() - 1);
        return r;
    }
    const std::string setup = std::string(gate_setup_namespaces) + " ";
    const std::string want = "post-restore ";
    r.setup_namespaces = line.rfind(setup, 0) == 0;
    if (!r.setup_namespaces && line.rfind(want, 0) != 0)
        throw error(fmt::format("malformed gate request '{}'", line));
    try {
        size_t used = 0;
        const auto digits = line.substr(r.setup_namespaces ? setup.size() : want.size());
        r.pid = pid_t(std::stol(digits, &used));
        if (used != digits.size() || (r.setup_namespaces && r.pid <= 0))
            throw error("not a pid");
        return r;
    } catch (const std::exception&) {
        throw error(fmt::format("malformed gate request '{}'", line));
    }
}

void answer_gate(int conn, bool resume, const std::string& reason) {
    write_line(conn, resume ? std::string(engines::gate_ok) : "refuse " + reason);
}

void answer_images(int conn, bool go, const std::string& reason) {
    write_line(conn, go ? std::string(engines::go_answer) : "refuse " + reason);
}

} // namespace ferry::engines
