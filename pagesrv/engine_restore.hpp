// Restoring a container through its engine (podman), post-copy.
//
// The migrator sends CRIU's images plus the engine's files ("engine.*":
// podman's config.dump and spec.dump, the writable layer's diff, /dev/shm).
// The daemon packs them as podman's checkpoint export, with Ferry's restore
// request inside the CRIU images, and runs `podman container restore
// --import`. Podman runs Ferry's runc shim, which makes runc's restore lazy
// and, as CRIU's action script, asks the daemon's gate socket at
// post-restore whether the tasks may resume.
#pragma once

#include "unique_fd.hpp"

#include <filesystem>
#include <string>
#include <vector>

namespace ferry::pagesrv::engine_restore {

inline constexpr const char* engine_file_prefix = "engine.";

// The engines the daemon can restore into; throws for others.
void check_engine(const std::string& engine, const std::string& container_name);

// Throws if the destination's podman already has a container by that name
// (restoring would fail, and cleaning up after it must not touch it).
void check_name_free(const std::string& container_name);

// Packs `dir`'s images and engine files as a podman export at `tar_out`:
// config.dump is pointed at the local image of the same name, and the
// source host's paths in it are dropped so podman makes its own.
void build_podman_import(const std::filesystem::path& dir, const std::string& migration_id,
                         const std::filesystem::path& tar_out);

// The gate: a unix socket in `dir` the shim connects to at post-restore.
unique_fd listen_gate(const std::filesystem::path& dir);
std::filesystem::path gate_path(const std::filesystem::path& dir);
// Reads the shim's "post-restore <pid>" line; returns the pid.
pid_t read_gate_request(int conn);
void answer_gate(int conn, bool resume, const std::string& reason);

// `podman container restore --import tar --name name`, logged in `dir`.
std::vector<std::string> podman_restore_command(const std::filesystem::path& tar,
                                                const std::string& container_name);
// `podman rm -f name`, after a restore that failed; errors are logged.
void remove_container(const std::string& container_name);
// The container's init on the host, from podman; 0 if unknown.
pid_t container_pid(const std::string& container_name);

} // namespace ferry::pagesrv::engine_restore
