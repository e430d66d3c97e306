// Docker: the container is created through dockerd's API with the source's
// configuration (Config and HostConfig, the runtime swapped for this host's
// Ferry shim) before the freeze. Warm (engines/README.md): `docker start
// --checkpoint` of a stand-in checkpoint runs before the freeze too, its
// runc waits at the gate, and the writable layer's diff goes onto the
// mounted root once the images are in. Cold: the diff is applied to its
// layer, the images go to its checkpoint directory (docker refuses any
// other for a restore), and `docker start --checkpoint` restores it.
#include "core/error.hpp"
#include "core/log.hpp"
#include "criu/criu_image.hpp"
#include "docker/containerd_staging.hpp"
#include "docker/docker_api.hpp"
#include "docker/docker_source.hpp"
#include "engine_request.hpp"
#include "engine_restore.hpp"
#include "tar_extract.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <fstream>
#include <utility>

namespace ferry::engines::docker {

namespace {

using namespace engine_restore_detail;

namespace fs = std::filesystem;
using json = nlohmann::json;

// The name of this dockerd's runtime that is Ferry's shim.
std::string ferry_runtime(const docker_api::client& api) {
    const auto info = api.call("GET", "/info");
    const auto runtimes = info.value("Runtimes", json::object());
    for (const auto& [name, rt] : runtimes.items())
        if (fs::path(rt.value("path", "")).filename() == "ferry-runc")
            return name;
    throw error("this host's dockerd has no runtime that is Ferry's runc shim; add to its "
                "daemon.json \"runtimes\": {\"ferry-runc\": {\"path\": \"/path/to/ferry-runc\"}}");
}

void require_image(const docker_api::client& api, const std::string& image) {
    const auto r = api.request("GET", "/images/" + docker_api::encode(image) + "/json");
    if (r.status == 404)
        throw error(fmt::format(
            "this host has no image '{}': build or load it here first (docker restores a "
            "container on top of its image)",
            image));
    if (r.status != 200)
        throw error(fmt::format("dockerd: image {}: HTTP {}", image, r.status));
}

// An overlay whiteout: a 0/0 character device hides the lower file.
void whiteout(const fs::path& p) {
    std::error_code ec;
    fs::remove_all(p, ec);
    fs::create_directories(p.parent_path());
    if (::mknod(p.c_str(), S_IFCHR | 0000, makedev(0, 0)))
        throw sys_error("mknod whiteout " + p.string());
}

class docker_restore final : public engine_restore {
  public:
    docker_restore(std::string name, host_tools tools)
        : _name(std::move(name)), _tools(std::move(tools)), _api(_tools.docker_socket) {}

    // Creating the container copies the image's whole tree with the vfs
    // driver (seconds): it must happen before the freeze.
    void reserve(const fs::path& dir, const std::string& image,
                 const std::vector<uint8_t>& config) override {
        if (_api.inspect_container(_name))
            throw error(
                fmt::format("a container named '{}' already exists on the destination", _name));
        (void)ferry_runtime(_api);
        if (!image.empty())
            require_image(_api, image);
        if (config.empty())
            throw error("the migrator sent no docker configuration for the container");
        try {
            _source = json::parse(config);
        } catch (const std::exception& e) {
            throw error(
                fmt::format("the container's docker configuration is malformed: {}", e.what()));
        }
        _record = dir / reservation_file;
        create();
    }

    // `docker start --checkpoint` of a stand-in checkpoint that holds only
    // Ferry's warm restore request: dockerd hands containerd the checkpoint
    // directory's content as the start begins, so the real images cannot go
    // there. The shim points runc at `dir` instead, where runc reads the
    // source's descriptors.json now and CRIU the images once they are in.
    std::vector<std::string> warm_command(const fs::path& dir, const std::string& migration_id,
                                          const std::vector<std::string>& criu_env,
                                          const std::vector<criu::engine_file>& files) override {
        if (_id.empty())
            throw error("the container was not created before the freeze");
        write_runc_descriptors(dir, files);
        _migration_id = migration_id;
        const auto checkpoint = checkpoint_name(migration_id);
        const auto stand_in = checkpoint_dir(checkpoint);
        fs::create_directories(stand_in);
        (void)write_restore_request(dir, stand_in, migration_id, devshm_tar(dir).string(), criu_env,
                                    _tools, true);
        _warm = true;
        return {_tools.docker, "start", "--checkpoint", checkpoint, _id};
    }

    // dockerd mounted the root: runc's config.json names it.
    void warm_waiting(const fs::path& bundle) override { _root = mounted_root(bundle); }

    std::vector<std::string> prepare(const fs::path& dir, const std::string& migration_id,
                                     const std::vector<std::string>& criu_env) override {
        if (_source.is_null())
            throw error("the container was not created before the freeze");
        // A warm start that failed removed it (remove()): created again.
        if (_id.empty())
            create();
        if (_warm) {
            // Onto the mounted root, as podman's warm restore does: the
            // overlay is mounted, and its layers must not change under it.
            apply_rootfs_diff_to_root(dir, _root);
            return {};
        }
        apply_rootfs_diff(dir);
        _migration_id = migration_id;
        const auto checkpoint = checkpoint_name(migration_id);
        const auto images = checkpoint_dir(checkpoint);
        fs::create_directories(images);
        for (const auto& entry : fs::directory_iterator(dir))
            if (entry.is_regular_file() && is_criu_image(entry.path()))
                fs::copy_file(entry.path(), images / entry.path().filename());
        const auto shm = devshm_tar(dir);
        write_restore_request(dir, images, migration_id,
                              fs::exists(shm) ? shm.string() : std::string(), criu_env, _tools);
        return {_tools.docker, "start", "--checkpoint", checkpoint, _id};
    }

    void remove() noexcept override {
        _warm = false;
        remove_staging();
        if (_id.empty())
            return;
        const auto id = std::exchange(_id, std::string());
        try {
            _api.remove_container(id);
            release(); // gone: nothing for a restarted daemon to remove
        } catch (const std::exception& e) {
            make_logger("pagesrv")->warn("cannot remove container {}: {}", _name, e.what());
        }
    }

    void release() noexcept override {
        remove_staging();
        std::error_code ec;
        if (!_record.empty())
            fs::remove(_record, ec);
    }

    pid_t container_pid() override {
        try {
            const auto j = _api.inspect_container(_id.empty() ? _name : _id);
            return j ? j->at("State").at("Pid").get<pid_t>() : 0;
        } catch (const std::exception&) {
            return 0;
        }
    }

  private:
    // Creates the container from the source's configuration, and records it.
    void create() {
        json body;
        try {
            body = _source.at("Config");
            body["HostConfig"] = _source.at("HostConfig");
        } catch (const std::exception&) {
            throw error("docker.json lacks Config or HostConfig");
        }
        // dockerd sets this itself when it has no default bridge; passed in,
        // it makes dockerd skip the container's /etc/hosts and resolv.conf,
        // which the dumped mount namespace has.
        body.erase("NetworkDisabled");
        // A network that moves: the copy starts with an address and a MAC of
        // its own (the source's address is not in the configuration; dockerd
        // allocates from this host's pool), and the daemon gives it the
        // source's (engine_restore.hpp).
        if (_links_move)
            body.erase("MacAddress");
        require_image(_api, body.value("Image", ""));
        body["HostConfig"]["Runtime"] = ferry_runtime(_api);
        const auto reply =
            _api.call("POST", "/containers/create?name=" + docker_api::encode(_name), body);
        _id = reply.value("Id", "");
        if (_id.empty())
            throw error("dockerd created the container but gave no id");
        std::ofstream(_record) << json{{"engine", "docker"}, {"name", _name}, {"id", _id}}.dump()
                               << "\n";
    }

  protected:
    void keep_addresses(const std::vector<netlink::link_identity>& links) override {
        _links_move = !links.empty();
    }

  private:
    // containerd's copy of the checkpoint it restored from, which it keeps
    // (containerd_staging.hpp): by then the restore has run or failed.
    void remove_staging() noexcept {
        if (const auto id = std::exchange(_migration_id, std::string()); !id.empty())
            if (const int n = remove_containerd_staging(id))
                make_logger("pagesrv")->debug("migration {}: removed containerd's {} copies of "
                                              "the checkpoint",
                                              id, n);
    }

    static std::string checkpoint_name(const std::string& migration_id) {
        return "ferry-" + migration_id;
    }
    // Docker restores only from the container's own checkpoint directory.
    fs::path checkpoint_dir(const std::string& checkpoint) const {
        return fs::path(_api.root_dir()) / "containers" / _id / "checkpoints" / checkpoint;
    }

    // The source's writable-layer changes, onto this container's layer.
    void apply_rootfs_diff(const fs::path& dir) {
        const auto j = _api.inspect_container(_id);
        if (!j)
            throw error(fmt::format("the container {} vanished after its creation", _name));
        const auto driver = j->at("GraphDriver").value("Name", "");
        fs::path layer;
        if (driver == "overlay2") {
            layer = j->at("GraphDriver").at("Data").at("UpperDir").get<std::string>();
        } else if (driver == "vfs") {
            layer = docker_api::vfs_layer_dir(_api.root_dir(), _id, "mount-id");
        } else {
            throw error(fmt::format("docker's storage driver {} is not supported here", driver));
        }
        for (const auto& d : deleted_files(dir)) {
            const auto p = path_below(layer, d);
            if (driver == "overlay2") {
                whiteout(p);
            } else {
                std::error_code ec;
                fs::remove_all(p, ec);
                if (ec)
                    throw error(fmt::format("cannot delete {}: {}", p.string(), ec.message()));
            }
        }
        extract_tar(engine_file(dir, "rootfs-diff.tar"), layer);
    }

    std::string _name;
    host_tools _tools;
    docker_api::client _api;
    json _source;              // the source's configuration ({"Config", "HostConfig"})
    std::string _id;           // once created
    fs::path _record;          // the reservation record, while it stands
    bool _links_move = false;  // keep_addresses: the source's network moves
    bool _warm = false;        // its start runs since before the freeze
    std::string _migration_id; // once a `docker start --checkpoint` is named
    fs::path _root;            // ... and dockerd mounted this root for it
};

} // namespace

void remove_if_never_started(const std::string& id, const host_tools& tools) {
    const docker_api::client api(tools.docker_socket);
    const auto j = api.inspect_container(id);
    if (!j)
        return;
    const auto status = j->at("State").value("Status", "");
    if (status != "created")
        throw error(fmt::format("container {} is {}, not just created: left alone", id, status));
    api.remove_container(id);
}

std::unique_ptr<engine_restore> make_restore(const std::string& name, const host_tools& tools) {
    return std::make_unique<docker_restore>(name, tools);
}

} // namespace ferry::engines::docker
