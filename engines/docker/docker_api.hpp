// Docker's Engine API over its unix socket, through libcurl: what Ferry asks
// dockerd directly (inspect, info, create, remove). Long-running commands
// (checkpoint create, start --checkpoint) go through the docker CLI
// (host_tools::docker) as child processes.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>

namespace ferry::docker_api {

struct api_reply {
    long status = 0;
    std::string body;
};

// One dockerd, by its socket (host_tools::docker_socket).
class client {
  public:
    explicit client(std::string socket) : _socket(std::move(socket)) {}

    // One request; throws ferry::error when dockerd cannot be reached. Any
    // HTTP status is returned as is.
    api_reply request(const std::string& method, const std::string& path,
                      const std::string& body = "",
                      std::chrono::milliseconds timeout = std::chrono::seconds(30)) const;
    // A request whose reply must be 2xx JSON (or empty: null); throws
    // ferry::error carrying dockerd's message otherwise.
    nlohmann::json call(const std::string& method, const std::string& path,
                        const nlohmann::json& body = nullptr,
                        std::chrono::milliseconds timeout = std::chrono::seconds(30)) const;
    // GET /containers/NAME/json, or nothing when dockerd has no such container.
    std::optional<nlohmann::json> inspect_container(const std::string& name_or_id) const;
    // DELETE /containers/NAME?force=1 (a running container is killed).
    void remove_container(const std::string& name_or_id) const;
    // dockerd's root directory (DockerRootDir).
    std::string root_dir() const;

  private:
    std::string _socket;
};

// Percent-encodes a name or id for use inside a request path or query.
std::string encode(const std::string& s);

// The vfs driver keeps no paths in inspect: its layer store names a
// container's directory ("mount-id") and its parent, docker's init layer
// ("init-id"). Throws if the store does not say.
std::filesystem::path vfs_layer_dir(const std::filesystem::path& root, const std::string& id,
                                    const char* which);

} // namespace ferry::docker_api
