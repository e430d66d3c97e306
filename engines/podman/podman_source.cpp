#include "podman/podman_source.hpp"

#include "core/error.hpp"
#include "criu/criu_image.hpp"
#include "engine_dump.hpp"
#include "engine_request.hpp"
#include "rootfs_diff.hpp"
#include "sys/subprocess.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <optional>

namespace ferry::engines::podman {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// The network's driver ("bridge", "macvlan", ...).
std::string network_driver(const std::string& network, const host_tools& tools) {
    try {
        auto out =
            run_capture({tools.podman, "network", "inspect", "--format", "{{.Driver}}", network},
                        query_timeout);
        return out.substr(0, out.find('\n'));
    } catch (const std::exception& e) {
        throw error(fmt::format("cannot inspect podman network '{}': {}", network, e.what()));
    }
}

} // namespace

container inspect(const std::string& name, const host_tools& tools) {
    std::string out;
    try {
        out = run_capture({tools.podman, "container", "inspect", name}, query_timeout);
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
        c.paused = j.at("State").value("Paused", false);
        c.bundle = j.at("StaticDir").get<std::string>();
        c.image = j.value("ImageName", "");
        c.named_volumes = named_volumes(j.value("Mounts", json::array()));
        json networks = json::object();
        if (const auto s = j.find("NetworkSettings"); s != j.end() && s->contains("Networks"))
            networks = s->at("Networks");
        for (const auto& [net, _] : networks.items())
            c.networks.push_back({net, network_driver(net, tools)});
        const auto& data = j.at("GraphDriver").at("Data");
        if (j.at("GraphDriver").at("Name").get<std::string>() != "overlay")
            throw error("only podman's overlay storage driver is supported");
        c.upper_dir = data.at("UpperDir").get<std::string>();
        if (data.contains("LowerDir"))
            c.lower_dirs = split_lower_dirs(data.at("LowerDir").get<std::string>());
        return c;
    } catch (const ferry::error&) {
        throw;
    } catch (const std::exception& e) {
        throw error(fmt::format("cannot read podman's description of '{}': {}", name, e.what()));
    }
}

void require_ferry_runtime(const host_tools& tools) {
    const auto out =
        run_capture({tools.podman, "info", "--format", "{{.Host.OCIRuntime.Path}}"}, query_timeout);
    const fs::path path = out.substr(0, out.find('\n'));
    if (path.filename() != "ferry-runc")
        throw error(fmt::format("podman runs containers with {}, not Ferry's runc shim; add\n"
                                "  [engine.runtimes]\n  runc = [\"/path/to/ferry-runc\"]\n"
                                "to containers.conf (examples/setup.sh installs it)",
                                path.string()));
}

namespace {

class podman_dump final : public engine_dump {
  public:
    podman_dump(container c, fs::path dir, std::string id, criu::dump_settings settings,
                host_tools tools)
        : engine_dump("podman", c, std::move(dir), std::move(id), std::move(settings),
                      std::move(tools)),
          _c(std::move(c)) {
        fs::create_directories(images_dir());
    }

    // CRIU writes the images (and its log) in the migrator's work dir, on
    // tmpfs, not in podman's bundle: on a disk each new file is an inode
    // made inside the freeze, and ext4's inode allocator took several ms
    // of a container's dump here. Podman's export then holds no images,
    // which Ferry never uses.
    fs::path images_dir() const override { return _dir / "images"; }
    fs::path redirected_images() const override { return images_dir(); }

    std::vector<criu::engine_file> engine_files() override {
        // What podman wrote before its runc started, read then (warm
        // destination), or now: parsing config.dump alone took 0.4-0.5 ms.
        configuration c = _held ? std::move(*_held) : read_configuration();
        _held.reset();
        auto& files = c.files;
        const fs::path& shm = c.shm_dir;
        const auto status = _c.bundle / "network.status";
        if (fs::exists(status))
            files.push_back({"network.status", criu::read_file(status)});
        // An empty /dev/shm is not sent: nothing to unpack on the
        // destination, inside the downtime.
        std::error_code ec;
        const bool shm_has_files = !shm.empty() && !fs::is_empty(shm, ec) && !ec;
        auto layer = writable_layer_files(
            [&](const fs::path& tar, std::vector<std::string>& deleted,
                const std::function<void()>& progress) {
                overlay_diff(_c.upper_dir, _c.lower_dirs, tar, deleted, progress);
            },
            shm_has_files ? shm : fs::path());
        files.insert(files.end(), std::make_move_iterator(layer.begin()),
                     std::make_move_iterator(layer.end()));
        return std::move(files);
    }

  private:
    // config.dump and spec.dump from the bundle, and the container's
    // /dev/shm (podman's ShmDir) from config.dump.
    struct configuration {
        std::vector<criu::engine_file> files;
        fs::path shm_dir;
    };
    [[nodiscard]] configuration read_configuration() const {
        configuration c;
        for (const char* name : {"config.dump", "spec.dump"}) {
            const auto p = _c.bundle / name;
            if (!fs::exists(p))
                throw error(fmt::format("podman's checkpoint wrote no {} before its runc started",
                                        p.string()));
            c.files.push_back({name, criu::read_file(p)});
        }
        c.shm_dir = json::parse(c.files[0].data).value("ShmDir", "");
        return c;
    }

    std::optional<configuration> _held; // read before the freeze

  protected:
    // Podman writes both into the bundle before it runs runc checkpoint.
    [[nodiscard]] bool holds_before_freeze() const override { return true; }
    [[nodiscard]] std::vector<criu::engine_file> configuration_before_freeze() override {
        _held = read_configuration();
        return _held->files;
    }

    void remove_container() override {
        std::error_code ec;
        fs::remove(_dir / "podman-export.tar", ec);
        engines::podman_remove(_tools.podman, _c.id);
    }

    std::vector<std::string> checkpoint_command() const override {
        // The export's rootfs and volumes are never used: Ferry ships the
        // writable layer itself, during the freeze.
        std::vector<std::string> cmd = {_tools.podman,
                                        "container",
                                        "checkpoint",
                                        "--export",
                                        (_dir / "podman-export.tar").string(),
                                        "--ignore-rootfs",
                                        "--ignore-volumes"};
        if (_settings.tcp_established)
            cmd.emplace_back("--tcp-established");
        cmd.push_back(_c.id);
        return cmd;
    }

    std::string log_hint() const override {
        return fmt::format("CRIU's dump.log in {}", images_dir().string());
    }

  private:
    container _c;
};

} // namespace

std::unique_ptr<source_container> open_source(const std::string& name, const host_tools& tools) {
    auto c = inspect(name, tools);
    require_ferry_runtime(tools);
    return std::make_unique<described_source<container, podman_dump>>(std::move(c), tools);
}

} // namespace ferry::engines::podman
