#include "docker_api.hpp"

#include "core/error.hpp"

#include <curl/curl.h>
#include <fmt/format.h>

#include <cctype>
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

api_reply client::request(const std::string& method, const std::string& path,
                          const std::string& body, std::chrono::milliseconds timeout) const {
    init_curl_once();
    std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> c(curl_easy_init(), curl_easy_cleanup);
    if (!c)
        throw error("curl_easy_init failed");
    const std::string& sock = _socket;
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

json client::call(const std::string& method, const std::string& path, const json& body,
                  std::chrono::milliseconds timeout) const {
    const auto r = request(method, path, body.is_null() ? "" : body.dump(), timeout);
    if (r.status < 200 || r.status >= 300) {
        std::string message = r.body;
        try {
            message = json::parse(r.body).at("message").get<std::string>();
        } catch (const std::exception&) {
            message = r.body; // not dockerd's JSON error: the body as it came
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

std::optional<json> client::inspect_container(const std::string& name_or_id) const {
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

void client::remove_container(const std::string& name_or_id) const {
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

std::string client::root_dir() const {
    const auto info = call("GET", "/info");
    const auto root = info.value("DockerRootDir", "");
    if (root.empty())
        throw error("dockerd does not say where its root directory is");
    return root;
}

} // namespace ferry::docker_api
