#include "docker/docker_source.hpp"

#include "core/error.hpp"
#include "criu/criu_image.hpp"
#include "criu/workload_release.hpp"
#include "docker/docker_api.hpp"
#include "engine_dump.hpp"
#include "network_hook.hpp"
#include "rootfs_diff.hpp"
#include "runc_state.hpp"
#include "sys/proc.hpp"

#include <fmt/format.h>

#include <sys/stat.h>

#include <fstream>

namespace ferry::engines::docker {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

void locate_vfs_layers(container& c, const fs::path& root) {
    c.layer_dir = docker_api::vfs_layer_dir(root, c.id, "mount-id");
    c.base_dir = docker_api::vfs_layer_dir(root, c.id, "init-id");
    if (!fs::is_directory(c.layer_dir) || !fs::is_directory(c.base_dir))
        throw error(
            fmt::format("docker's vfs layers of {} are not where the layer store says", c.name));
}

// The bundle of a running container's task: its init is a child of its
// containerd shim, whose work dir is the bundle.
fs::path task_bundle(pid_t init) {
    const pid_t shim = proc::parent(init);
    const auto shim_name = proc::comm(shim);
    if (shim_name.rfind("containerd-shim", 0) != 0)
        throw error(fmt::format("the container's init is a child of '{}', not of a "
                                "containerd shim",
                                shim_name));
    return fs::read_symlink(fmt::format("/proc/{}/cwd", shim));
}

// When docker's network hook configures the container's namespace, the
// destination sets up its copy's before the restore and CRIU joins it
// there (network_hook.hpp): the dump records the namespace as external, as
// runc's own checkpoint does for one its bundle names.
criu::dump_settings with_external_netns(criu::dump_settings settings, const container& c) {
    std::ifstream in(task_bundle(c.pid) / "config.json");
    if (!engines::network_set_up_by_hook(json::parse(in)))
        return settings;
    struct stat st {};
    const auto ns = fmt::format("/proc/{}/ns/net", c.pid);
    if (::stat(ns.c_str(), &st) != 0)
        throw sys_error("stat " + ns);
    settings.criu_options +=
        fmt::format("external net[{}]:{}\n", st.st_ino, engines::runc_netns_key);
    return settings;
}

} // namespace

container inspect(const std::string& name, const docker_api::client& api) {
    const auto j = api.inspect_container(name);
    if (!j)
        throw error(fmt::format("docker has no container '{}'", name));
    try {
        container c;
        c.id = j->at("Id").get<std::string>();
        c.name = j->at("Name").get<std::string>();
        if (!c.name.empty() && c.name[0] == '/')
            c.name.erase(0, 1);
        const auto& state = j->at("State");
        c.pid = state.at("Pid").get<pid_t>();
        c.running = state.at("Running").get<bool>();
        c.paused = state.value("Paused", false);
        c.runtime = j->at("HostConfig").value("Runtime", "");
        c.named_volumes = named_volumes(j->value("Mounts", json::array()));
        json networks = json::object();
        if (const auto s = j->find("NetworkSettings"); s != j->end() && s->contains("Networks"))
            networks = s->at("Networks");
        for (const auto& [net, _] : networks.items()) {
            // A network dockerd no longer knows (its "bridge" with
            // "bridge": "none") is nothing that could move.
            const auto reply = api.request("GET", "/networks/" + docker_api::encode(net));
            std::string driver = "unknown";
            if (reply.status == 200)
                driver = json::parse(reply.body).value("Driver", "unknown");
            c.networks.push_back({net, driver});
        }
        c.config = {
            {"Name", c.name}, {"Config", j->at("Config")}, {"HostConfig", j->at("HostConfig")}};
        c.image = j->at("Config").value("Image", "");
        c.storage_driver = j->at("GraphDriver").at("Name").get<std::string>();
        const fs::path root = api.root_dir();
        if (c.storage_driver == "overlay2") {
            const auto& data = j->at("GraphDriver").at("Data");
            c.upper_dir = data.at("UpperDir").get<std::string>();
            c.lower_dirs = split_lower_dirs(data.value("LowerDir", ""));
        } else if (c.storage_driver == "vfs") {
            locate_vfs_layers(c, root);
        } else {
            throw error(fmt::format("docker's storage driver {} is not supported (overlay2 and "
                                    "vfs are)",
                                    c.storage_driver));
        }
        const auto ipc = j->at("HostConfig").value("IpcMode", "");
        if (ipc == "private" || ipc == "shareable" || ipc.empty())
            c.shm_dir = root / "containers" / c.id / "mounts" / "shm";
        return c;
    } catch (const ferry::error&) {
        throw;
    } catch (const std::exception& e) {
        throw error(fmt::format("cannot read docker's description of '{}': {}", name, e.what()));
    }
}

void require_ferry_runtime(const container& c, const docker_api::client& api) {
    const auto info = api.call("GET", "/info");
    std::string path;
    try {
        path = info.at("Runtimes").at(c.runtime).value("path", "");
    } catch (const std::exception&) {
        throw error(fmt::format("dockerd does not know the runtime '{}' of {}", c.runtime, c.name));
    }
    if (fs::path(path).filename() != "ferry-runc")
        throw error(fmt::format(
            "container {} runs under runtime '{}' ({}), not Ferry's runc shim; add to dockerd's "
            "daemon.json\n  \"runtimes\": {{\"ferry-runc\": {{\"path\": "
            "\"/path/to/ferry-runc\"}}}}, "
            "\"default-runtime\": \"ferry-runc\"\nand create the container again",
            c.name, c.runtime, path.empty() ? "runc" : path));
}

namespace {

class docker_dump final : public engine_dump {
  public:
    // Runs before the freeze: the tree the container's layer was copied
    // from is indexed now, so the freeze only walks the layer itself.
    docker_dump(container c, fs::path dir, std::string id, criu::dump_settings settings,
                host_tools tools)
        : engine_dump("docker", c, std::move(dir), std::move(id),
                      with_external_netns(std::move(settings), c), std::move(tools)),
          _c(std::move(c)), _api(_tools.docker_socket) {
        fs::create_directories(images_dir());
        if (_c.storage_driver == "vfs")
            _base = tree_index::scan(_c.base_dir);
    }

    fs::path images_dir() const override { return _dir / "images"; }

    std::vector<criu::engine_file> engine_files() override {
        // The configuration went ahead, with the prepare (docker.hpp). An
        // empty /dev/shm is not sent: the shim would need its mount to
        // restore into, which not every IPC mode has.
        std::error_code ec;
        const bool shm_has_files = !_c.shm_dir.empty() && !fs::is_empty(_c.shm_dir, ec) && !ec;
        return writable_layer_files(
            [&](const fs::path& tar, std::vector<std::string>& deleted,
                const std::function<void()>& progress) {
                if (_c.storage_driver == "overlay2")
                    overlay_diff(_c.upper_dir, _c.lower_dirs, tar, deleted, progress);
                else
                    tree_diff(_c.layer_dir, _base, tar, deleted, progress);
            },
            shm_has_files ? _c.shm_dir : fs::path());
    }

  protected:
    void remove_container() override { _api.remove_container(_c.id); }

    std::vector<std::string> checkpoint_command() const override {
        // Docker's copy of the checkpoint is never used (Ferry's images land
        // in images_dir); it goes to Ferry's work dir, not the container's.
        return {_tools.docker,
                "checkpoint",
                "create",
                "--checkpoint-dir",
                (_dir / "docker-checkpoint").string(),
                _c.id,
                "ferry-" + _migration_id};
    }

    fs::path redirected_images() const override { return images_dir(); }

    // runc's descriptors.json for a warm restore on the destination (docker
    // pauses the container before its runc starts, so the checkpoint cannot
    // hold to send it as podman's does). runc writes it from its state.json:
    // the container's init is a child of its containerd shim, whose work dir
    // is the task's bundle; the bundle's options.json names runc's root, and
    // the bundle's parent dir is containerd's namespace. Not found: the
    // destination restores cold.
    std::vector<criu::engine_file> configuration_before_start() const override {
        try {
            const auto bundle = task_bundle(_c.pid);
            std::ifstream opts(bundle / "options.json");
            if (!opts)
                throw error(
                    fmt::format("no options.json in the task's bundle {}", bundle.string()));
            const fs::path root = json::parse(opts).at("root").get<std::string>();
            const auto text =
                runc_external_descriptors(root / bundle.parent_path().filename(), _c.id);
            return {{"descriptors.json", {text.begin(), text.end()}}};
        } catch (const std::exception& e) {
            _log->warn("no warm restore for {}: runc's descriptors are not readable here ({})",
                       _c.name, e.what());
            return {};
        }
    }

    // containerd pauses the container before the checkpoint and resumes it
    // when the checkpoint fails. The shim skips both for Ferry's checkpoint;
    // if it could not (its marker could not be written), CRIU thawed the
    // cgroup once it held the tasks and, killed, never froze it back: runc's
    // resume then finds nothing paused and dockerd goes on reporting the
    // container paused. So the container is paused again, briefly, and
    // unpaused through dockerd.
    void resync_engine() noexcept override {
        try {
            const auto j = _api.inspect_container(_c.id);
            if (!j || !j->at("State").value("Paused", false))
                return;
            const pid_t pid = j->at("State").value("Pid", 0);
            if (pid <= 0 || criu::cgroup_frozen(pid) || !criu::set_cgroup_frozen(pid, true))
                return;
            (void)_api.call("POST", "/containers/" + docker_api::encode(_c.id) + "/unpause");
            _log->info("docker's record of {} said paused after CRIU was killed: unpaused it",
                       _c.name);
        } catch (const std::exception& e) {
            _log->warn("cannot bring docker's record of {} in line: {}", _c.name, e.what());
        }
    }

    std::string log_hint() const override {
        return fmt::format("CRIU's dump.log in {}", images_dir().string());
    }

  private:
    container _c;
    docker_api::client _api;
    tree_index _base;
};

} // namespace

namespace {

class docker_source final : public described_source<container, docker_dump> {
  public:
    using described_source::described_source;
    // dockerd creates the container from it at the prepare, before the
    // freeze (copying the image's layers takes seconds with vfs).
    std::vector<uint8_t> config_for_prepare() const override {
        const auto text = _c.config.dump();
        return {text.begin(), text.end()};
    }
};

} // namespace

std::unique_ptr<source_container> open_source(const std::string& name, const host_tools& tools) {
    const docker_api::client api(tools.docker_socket);
    auto c = inspect(name, api);
    require_ferry_runtime(c, api);
    return std::make_unique<docker_source>(std::move(c), tools);
}

} // namespace ferry::engines::docker
