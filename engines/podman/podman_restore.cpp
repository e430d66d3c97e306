// Podman: the images and podman's files are packed as podman's checkpoint
// export (config.dump pointed at the local image of the same name, the
// source host's paths cleared) and restored with `podman container restore
// --import --name NAME`.
//
// Warm: the source's podman writes config.dump and spec.dump before its runc
// starts, and holds there (engine_dump.hpp), so the import starts before the
// freeze, from an export that holds only those and a stand-in for the
// images. Podman then creates the container, its network namespace and its
// mounts, and starts conmon and runc; the shim waits at the gate. Once the
// images are in, the writable layer's changes go onto the mounted root (as
// podman's own import would apply them) and the shim lets runc restore from
// the session's directory.
#include "core/error.hpp"
#include "core/log.hpp"
#include "criu/criu_image.hpp"
#include "engine_request.hpp"
#include "engine_restore.hpp"
#include "podman/podman_source.hpp"
#include "sys/subprocess.hpp"
#include "tar_extract.hpp"
#include "tar_writer.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>

namespace ferry::engines::podman {

namespace {

using namespace engine_restore_detail;

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string local_image_id(const std::string& podman, const std::string& name) {
    try {
        auto out =
            run_capture({podman, "image", "inspect", "--format", "{{.Id}}", name}, query_timeout);
        return out.substr(0, out.find('\n'));
    } catch (const std::exception&) {
        throw error(fmt::format(
            "this host has no image '{}': build or load it here first (podman restores a "
            "container on top of its image)",
            name));
    }
}

// A container whose network moves: the copy gets addresses of its own from
// podman's IPAM, never the source's. Its network plugin announces the
// addresses it configures (CNI's macvlan sends gratuitous ARP), which for
// the source's would draw the clients' traffic to a copy with no sockets
// yet, whose kernel would reset their connections. The daemon adds the
// source's addresses itself, unannounced, before CRIU restores the
// sockets, and the copy takes the source's MACs at the resume.
// `links` checks that every network names a link the source has.
void own_addresses(json& c, const std::vector<netlink::link_identity>& links) {
    if (!c.contains("newNetworks") || !c["newNetworks"].is_object())
        throw error("config.dump names no network the container's addresses could come back on");
    for (auto& [network, opts] : c["newNetworks"].items()) {
        const std::string link = opts.value("interface_name", "");
        if (std::none_of(links.begin(), links.end(), [&](const auto& l) { return l.name == link; }))
            throw error(fmt::format("the container's network {} names link '{}', which it does not "
                                    "have",
                                    network, link));
        opts.erase("static_ips");
        opts.erase("static_mac");
    }
}

// `image_ids`: the local ids of image names already looked up (before the
// freeze: each podman query costs tens of milliseconds of downtime).
// `links`: the source's, when its network moves with it (else empty).
std::vector<uint8_t>
patched_config(const std::vector<uint8_t>& raw, const std::map<std::string, std::string>& image_ids,
               const std::string& podman,
               const std::optional<std::vector<netlink::link_identity>>& links) {
    json c;
    try {
        c = json::parse(raw);
    } catch (const std::exception& e) {
        throw error(fmt::format("podman's config.dump is malformed: {}", e.what()));
    }
    const std::string image = c.value("rootfsImageName", "");
    if (image.empty())
        throw error("config.dump names no image (containers from a rootfs are not supported)");
    const auto known = image_ids.find(image);
    c["rootfsImageID"] = known != image_ids.end() ? known->second : local_image_id(podman, image);
    // Paths of the source host's container directories: podman makes its
    // own for the new container when they are empty.
    const std::string old_id = c.value("id", "");
    for (const char* key : {"conmonPidFile", "pid_file", "logPath"})
        if (c.contains(key) && c[key].is_string() && !old_id.empty() &&
            c[key].get<std::string>().find(old_id) != std::string::npos)
            c[key] = "";
    if (links)
        own_addresses(c, *links);
    const auto text = c.dump();
    return {text.begin(), text.end()};
}

class podman_restore final : public engine_restore {
  public:
    podman_restore(std::string name, host_tools tools)
        : _name(std::move(name)), _tools(std::move(tools)) {}

    void reserve(const fs::path& dir, const std::string& image,
                 const std::vector<uint8_t>& /*config*/) override {
        _record_dir = dir;
        bool exists = true;
        try {
            (void)run_capture({_tools.podman, "container", "exists", _name}, query_timeout);
        } catch (const std::exception&) {
            exists = false; // exit status 1: no such container
        }
        if (exists)
            throw error(
                fmt::format("a container named '{}' already exists on the destination", _name));
        if (!image.empty())
            _image_ids[image] = local_image_id(_tools.podman, image);
    }

    std::vector<std::string> warm_command(const fs::path& dir, const std::string& migration_id,
                                          const std::vector<std::string>& criu_env,
                                          const std::vector<criu::engine_file>& files) override {
        const auto& config = sent_file(files, "config.dump");
        const auto& spec = sent_file(files, "spec.dump");
        write_runc_descriptors(dir, files);
        const auto tar_out = dir / "podman-warm.tar";
        tar_writer tar(tar_out);
        tar.add_bytes("config.dump",
                      patched_config(config.data, _image_ids, _tools.podman, _links));
        tar.add_bytes("spec.dump", spec.data);
        // Podman only checks that a checkpoint is there; runc restores from
        // `dir`, where the images arrive.
        tar.add_bytes("checkpoint/inventory.img", std::span<const uint8_t>());
        const auto req = write_restore_request(dir, dir, migration_id, devshm_tar(dir).string(),
                                               criu_env, _tools, true);
        tar.add_path(std::string("checkpoint/") + engines::restore_request_file, req);
        tar.close();
        _created = true;
        _warm = true;
        // Podman creates the container now: a daemon that dies before it
        // runs removes it when it starts again.
        _record = _record_dir / reservation_file; // reserve() came first
        std::ofstream(_record) << json{{"engine", "podman"}, {"name", _name}, {"id", _name}}.dump()
                               << "\n";
        return restore_command(tar_out);
    }

    // Podman mounted the root: runc's config.json names it (podman itself
    // answers no query while its restore holds the container's lock).
    void warm_waiting(const fs::path& bundle) override { _root = mounted_root(bundle); }

    std::vector<std::string> prepare(const fs::path& dir, const std::string& migration_id,
                                     const std::vector<std::string>& criu_env) override {
        if (_warm) {
            // The shim refills /dev/shm from devshm_tar(dir) if the source
            // sent one (not when its /dev/shm was empty: no untar to run).
            apply_rootfs_diff_to_root(dir, _root);
            return {};
        }
        (void)engine_file(dir, "config.dump");
        (void)engine_file(dir, "spec.dump");
        const auto tar_out = dir / "podman-import.tar";
        tar_writer tar(tar_out);
        for (const auto& entry : fs::directory_iterator(dir)) {
            const auto name = entry.path().filename().string();
            if (!entry.is_regular_file())
                continue;
            if (name.rfind(engine_file_prefix, 0) == 0) {
                const auto engine_name = name.substr(std::strlen(engine_file_prefix));
                auto data = criu::read_file(entry.path());
                if (engine_name == "config.dump")
                    data = patched_config(data, _image_ids, _tools.podman, _links);
                tar.add_bytes(engine_name, data);
            } else if (is_criu_image(entry.path())) {
                tar.add_path("checkpoint/" + name, entry.path());
            }
        }
        const auto req = write_restore_request(dir, dir, migration_id, "", criu_env, _tools);
        tar.add_path(std::string("checkpoint/") + engines::restore_request_file, req);
        tar.close();
        _created = true;
        // --name gives the container a new id: the old one may still be
        // known to a runc root this host shares with the source (as the
        // testbed does).
        return restore_command(tar_out);
    }

    void remove() noexcept override {
        _warm = false;
        if (!_created)
            return;
        _created = false;
        try {
            engines::podman_remove(_tools.podman, _name);
            release(); // gone: nothing for a restarted daemon to remove
        } catch (const std::exception& e) {
            make_logger("pagesrv")->warn("cannot remove container {}: {}", _name, e.what());
        }
    }

    void release() noexcept override {
        std::error_code ec;
        if (!_record.empty())
            fs::remove(_record, ec);
        _record.clear();
    }

    pid_t container_pid() override {
        try {
            auto out = run_capture(
                {_tools.podman, "container", "inspect", "--format", "{{.State.Pid}}", _name},
                query_timeout);
            return pid_t(std::stol(out));
        } catch (const std::exception&) {
            return 0;
        }
    }

  protected:
    void keep_addresses(const std::vector<netlink::link_identity>& links) override {
        if (!links.empty()) // loopback only: no network to give addresses on
            _links = links;
    }

  private:
    std::vector<std::string> restore_command(const fs::path& tar) const {
        std::vector<std::string> cmd = {_tools.podman, "container", "restore", "--import",
                                        tar.string(),  "--name",    _name};
        // Its own addresses and MAC until the daemon gives it the source's
        // (own_addresses above). Podman refuses --tcp-established with
        // --name: the shim gives it to runc.
        if (_links) {
            cmd.emplace_back("--ignore-static-ip");
            cmd.emplace_back("--ignore-static-mac");
        }
        return cmd;
    }

    // What podman's import does with rootfs-diff.tar and deleted.files, onto
    // the root it mounted for the warm restore.

    std::string _name;
    host_tools _tools;
    std::map<std::string, std::string> _image_ids;
    bool _created = false; // podman may have created it, even if its restore failed
    bool _warm = false;    // its restore runs since before the freeze
    fs::path _root;        // the warm container's mounted root
    fs::path _record;      // the reservation record, while it stands
    fs::path _record_dir;  // where it goes (reserve()'s dir, on disk)
    // The source's links, when the container's network moves with it.
    std::optional<std::vector<netlink::link_identity>> _links;
};

} // namespace

void remove_if_never_started(const std::string& name, const host_tools& tools) {
    std::string status;
    try {
        status = run_capture(
            {tools.podman, "container", "inspect", "--format", "{{.State.Status}}", name},
            query_timeout);
        status = status.substr(0, status.find('\n'));
    } catch (const std::exception&) {
        return; // no such container
    }
    if (status == "running" || status == "paused")
        throw error(fmt::format("container {} is {}: left alone", name, status));
    engines::podman_remove(tools.podman, name);
}

std::unique_ptr<engine_restore> make_restore(const std::string& name, const host_tools& tools) {
    return std::make_unique<podman_restore>(name, tools);
}

} // namespace ferry::engines::podman
