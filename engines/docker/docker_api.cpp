#include "docker_api.hpp"

#include "core/error.hpp"

#include <curl/curl.h>
#include <fmt/format.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>

namespace ferry::docker_api {

namespace {

using json = nlohmann::json;

size_t append_body(char* data, size_t size, size_t n, void* out) {
    static_cast<std::string*>(out)->append(data, size * n);
    return size * n;
}

void init_curl_once() {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_NOTHING); });
}

} // namespace

std::string encode(const std::string& s) {
    std::string out;
    for (const unsigned char c : s) {
        if (std::isalnum(c) || c == '-' || c == '_' || c == '.')
            out += char(c);
        else
            out += fmt::format("%{:02X}", c);
    }
    return out;
}

std::string socket_path() {
    const char* host = std::getenv("DOCKER_HOST");
    if (!host || !*host)
        return "/var/run/docker.sock";
    const std::string h = host;
    const std::string scheme = "unix://";
    if (h.rfind(scheme, 0) != 0)
        throw error(fmt::format("DOCKER_HOST={} is not a unix socket; Ferry talks to the local "
                                "dockerd only",
                                h));
    return h.substr(scheme.size());
}

api_reply request(const std::string& method, const std::string& path, const std::string& body,
                  std::chrono::milliseconds timeout) {
    init_curl_once();
    std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> c(curl_easy_init(), curl_easy_cleanup);
    if (!c)
        throw error("curl_easy_init failed");
    const std::string sock = socket_path();
    // The host part is ignored on a unix socket; API v1.41 is dockerd 20.10's.
    const std::string url = "http://docker/v1.41" + path;
    api_reply reply;
    std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> headers(
        curl_slist_append(nullptr, "Content-Type: application/json"), curl_slist_free_all);
    curl_easy_setopt(c.get(), CURLOPT_UNIX_SOCKET_PATH, sock.c_str());
    curl_easy_setopt(c.get(), CURLOPT_URL, url.c_str());
    curl_easy_setopt(c.get(), CURLOPT_CUSTOMREQUEST, method.c_str());
    curl_easy_setopt(c.get(), CURLOPT_TIMEOUT_MS, long(timeout.count()));
    curl_easy_setopt(c.get(), CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c.get(), CURLOPT_WRITEFUNCTION, append_body);
    curl_easy_setopt(c.get(), CURLOPT_WRITEDATA, &reply.body);
    if (!body.empty() || method == "POST") {
        curl_easy_setopt(c.get(), CURLOPT_HTTPHEADER, headers.get());
        curl_easy_setopt(c.get(), CURLOPT_POSTFIELDS, body.c_str());
        curl_easy_setopt(c.get(), CURLOPT_POSTFIELDSIZE, long(body.size()));
    }
    const CURLcode rc = curl_easy_perform(c.get());
    if (rc != CURLE_OK)
        throw error(
            fmt::format("dockerd at {}: {} {}: {}", sock, method, path, curl_easy_strerror(rc)));
    curl_easy_getinfo(c.get(), CURLINFO_RESPONSE_CODE, &reply.status);
    return reply;
}

json call(const std::string& method, const std::string& path, const json& body,
          std::chrono::milliseconds timeout) {
    const auto r = request(method, path, body.is_null() ? "" : body.dump(), timeout);
    if (r.status < 200 || r.status >= 300) {
        std::string message = r.body;
        try {
            message = json::parse(r.body).at("message").get<std::string>();
        } catch (const std::exception&) {
        }
        throw error(fmt::format("dockerd: {} {}: {} (HTTP {})", method, path, message, r.status));
    }
    if (r.body.empty())
        return nullptr;
    try {
        return json::parse(r.body);
    } catch (const std::exception& e) {
        throw error(fmt::format("dockerd: {} {}: malformed reply: {}", method, path, e.what()));
    }
}

std::optional<json> inspect_container(const std::string& name_or_id) {
    const auto r = request("GET", "/containers/" + encode(name_or_id) + "/json");
    if (r.status == 404)
        return std::nullopt;
    if (r.status != 200)
        throw error(fmt::format("dockerd: inspect {}: HTTP {}: {}", name_or_id, r.status, r.body));
    try {
        return json::parse(r.body);
    } catch (const std::exception& e) {
        throw error(fmt::format("dockerd: inspect {}: malformed reply: {}", name_or_id, e.what()));
    }
}

std::string cli_binary() {
    const char* env = std::getenv("FERRY_DOCKER");
    return env && *env ? env : "docker";
}

void remove_container(const std::string& name_or_id) {
    (void)call("DELETE", "/containers/" + encode(name_or_id) + "?force=1&v=0");
}

std::filesystem::path vfs_layer_dir(const std::filesystem::path& root, const std::string& id,
                                    const char* which) {
    const auto file = root / "image" / "vfs" / "layerdb" / "mounts" / id / which;
    std::ifstream in(file);
    std::string name;
    if (!std::getline(in, name) || name.empty() || name.find('/') != std::string::npos)
        throw error(fmt::format("cannot read docker's layer store at {}", file.string()));
    return root / "vfs" / "dir" / name;
}

std::string root_dir() {
    const auto info = call("GET", "/info");
    const auto root = info.value("DockerRootDir", "");
    if (root.empty())
        throw error("dockerd does not say where its root directory is");
    return root;
}

} // namespace ferry::docker_api
