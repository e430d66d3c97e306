// The runc shim's request files: what the migrator writes reads back the
// same, and a request shaped by someone else gets a clear error.
#include "engine_request.hpp"
#include "engine_restore.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

using namespace ferry::engines;
using Catch::Matchers::Contains;

namespace {

struct scratch_dir {
    std::filesystem::path path;
    scratch_dir() {
        char tmpl[] = "/tmp/ferry-request-test.XXXXXX";
        path = ::mkdtemp(tmpl);
    }
    ~scratch_dir() { std::filesystem::remove_all(path); }
};

void write_text(const std::filesystem::path& p, const std::string& text) {
    std::ofstream(p) << text;
}

std::string read_text(const std::filesystem::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

} // namespace

TEST_CASE("a checkpoint request reads back as it was written", "[engine_request]") {
    scratch_dir d;
    checkpoint_request r;
    r.migration_id = "0123456789abcdef";
    r.migrator_pid = 4242;
    r.page_server_port = 27001;
    r.status_fifo = "/run/ferry/x/status";
    r.images_dir = "/run/ferry/x/images";
    r.criu_env = {"CRIU_FAULT=130"};
    write_request(d.path / "c.json", r);
    const auto back = read_checkpoint_request(d.path / "c.json");
    REQUIRE(back);
    CHECK(back->migration_id == r.migration_id);
    CHECK(back->migrator_pid == 4242);
    CHECK(back->page_server_port == 27001);
    CHECK(back->status_fifo == r.status_fifo);
    CHECK(back->images_dir == r.images_dir);
    CHECK(back->criu_env == r.criu_env);
    CHECK_FALSE(read_checkpoint_request(d.path / "missing.json"));
}

TEST_CASE("a request with numbers out of range or of the wrong kind is refused",
          "[engine_request]") {
    scratch_dir d;
    const std::string head =
        R"({"migration_id": "ab", "migrator_pid": 1, "status_fifo": "/run/x", "criu_config": "", )"
        R"("images_dir": "", "page_server_port": )";
    // 2.7e32 parses as a float: converting it to a port was undefined
    // behaviour (found by fuzz-engine-request).
    for (const char* port :
         {"270000000000000000000000000000001", "70000", "-1", "27001.5", "\"27001\"", "true"}) {
        write_text(d.path / "r.json", head + port + "}");
        INFO(port);
        CHECK_THROWS_WITH(read_checkpoint_request(d.path / "r.json"),
                          Contains("lacks a valid 'page_server_port'"));
    }
    write_text(d.path / "r.json", head + "65535}");
    CHECK(read_checkpoint_request(d.path / "r.json")->page_server_port == 65535);
}

TEST_CASE("a request for CRIU environment beyond the allowed entry is refused",
          "[engine_request]") {
    scratch_dir d;
    write_text(d.path / "r.json",
               R"({"migration_id": "ab", "migrator_pid": 1, "page_server_port": 1, )"
               R"("status_fifo": "/run/x", "criu_config": "", "images_dir": "", )"
               R"("criu_env": ["LD_PRELOAD=/tmp/evil.so"]})");
    CHECK_THROWS_WITH(read_checkpoint_request(d.path / "r.json"),
                      Contains("'LD_PRELOAD=/tmp/evil.so', which is not allowed"));
    CHECK(criu_env_allowed("CRIU_FAULT=130"));
    CHECK(criu_env_allowed("CRIU_FAULT=6"));
    CHECK_FALSE(criu_env_allowed("CRIU_FAULT=5"));
    CHECK_FALSE(criu_env_allowed("CRIU_FAULT=130 "));
    CHECK(criu_env_allowed("FERRY_CRIU_LOG_LEVEL=0"));
    CHECK(criu_env_allowed("FERRY_CRIU_LOG_LEVEL=4"));
    CHECK_FALSE(criu_env_allowed("FERRY_CRIU_LOG_LEVEL=5"));
    CHECK_FALSE(criu_env_allowed("FERRY_CRIU_LOG_LEVEL=33"));
    CHECK_FALSE(criu_env_allowed("FERRY_CRIU_LOG_LEVEL="));
    CHECK_FALSE(criu_env_allowed("FERRY_CRIU_LOG_LEVELX3"));
    CHECK(criu_log_level_env(3) == "FERRY_CRIU_LOG_LEVEL=3");
    CHECK_THROWS_WITH(criu_log_level_env(5), Contains("no log level 5"));
    write_text(d.path / "r.json", "{not json");
    CHECK_THROWS_WITH(read_checkpoint_request(d.path / "r.json"), Contains("malformed"));
}

TEST_CASE("a warm restore request and a held checkpoint read back as written", "[engine_request]") {
    scratch_dir d;
    restore_request r;
    r.migration_id = "0123456789abcdef";
    r.lazy_socket = "/run/ferry/x/lazy-pages.socket";
    r.gate_socket = "/run/ferry/x/gate.socket";
    r.criu_config = "/run/ferry/x/criu-restore.conf";
    r.wait_for_images = true;
    r.images_dir = "/run/ferry/x";
    write_request(d.path / "r.json", r);
    const auto back = read_restore_request(d.path / "r.json");
    REQUIRE(back);
    CHECK(back->wait_for_images);
    CHECK(back->images_dir == r.images_dir);
    CHECK_FALSE(back->criu_waits);
    r.criu_waits = true;
    write_request(d.path / "waits.json", r);
    CHECK(read_restore_request(d.path / "waits.json")->criu_waits);

    // Waiting for images with nowhere to take them from is malformed.
    r.images_dir.clear();
    write_request(d.path / "bad.json", r);
    CHECK_THROWS_WITH(read_restore_request(d.path / "bad.json"), Contains("invalid request"));

    checkpoint_request c;
    c.migration_id = "ab";
    c.migrator_pid = 1;
    c.page_server_port = 1;
    c.status_fifo = "/run/x";
    c.hold_socket = "/run/ferry/x/hold.socket";
    write_request(d.path / "c.json", c);
    const auto held = read_checkpoint_request(d.path / "c.json");
    REQUIRE(held);
    CHECK(held->hold_socket == c.hold_socket);
}

TEST_CASE("the gate's requests: images for a warm restore, post-restore for the resume",
          "[engine_request]") {
    auto ask = [](const std::string& line) {
        int sv[2];
        REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        ferry::unique_fd a(sv[0]), b(sv[1]);
        REQUIRE(::write(a.get(), line.data(), line.size()) == ssize_t(line.size()));
        return read_gate_request(b.get());
    };
    const auto images = ask("images /var/lib/containers/x/userdata\n");
    CHECK(images.images);
    CHECK(images.bundle == "/var/lib/containers/x/userdata");
    const auto resume = ask("post-restore 4242\n");
    CHECK_FALSE(resume.images);
    CHECK(resume.pid == 4242);
    CHECK_THROWS_WITH(ask("images relative/path\n"), Contains("malformed gate request"));
    CHECK_THROWS_WITH(ask("post-restore many\n"), Contains("malformed gate request"));
}

TEST_CASE("a restore's CRIU config narrows to the commit gate only where it names actions",
          "[engine_request]") {
    scratch_dir d;
    const auto conf = d.path / "criu-restore.conf";
    SECTION("a CRIU with criu-patches/0013: setup-namespaces is dropped, the rest kept") {
        write_text(conf, "action-script /x/ferry-criu-action\n"
                         "action-script-actions post-restore,setup-namespaces\n"
                         "tcp-established\n");
        criu_config_gate_only(conf);
        CHECK(read_text(conf) == "action-script /x/ferry-criu-action\n"
                                 "action-script-actions post-restore\n"
                                 "tcp-established\n");
    }
    SECTION("a CRIU without it: the config names no actions and stays as it was") {
        const std::string text = "action-script /x/ferry-criu-action\ntcp-established\n";
        write_text(conf, text);
        criu_config_gate_only(conf);
        CHECK(read_text(conf) == text);
    }
    SECTION("no config: a clear error") {
        CHECK_THROWS_WITH(criu_config_gate_only(d.path / "absent.conf"),
                          Contains("cannot read CRIU's config"));
    }
}

TEST_CASE("a restore's CRIU config keeps runc's notifications only where runc acts",
          "[engine_request]") {
    scratch_dir d;
    const auto conf = d.path / "criu-restore.conf";
    write_text(conf, std::string("action-socket /x/gate.socket\n"
                                 "action-script-actions post-restore\n") +
                         rpc_notify_option + " " + rpc_notify_runc + "\ntcp-established\n");
    narrow_criu_config(conf, rpc_notify_option, rpc_notify_runc_without_hooks);
    CHECK(read_text(conf) == "action-socket /x/gate.socket\n"
                             "action-script-actions post-restore\n"
                             "rpc-notify-actions post-restore\n"
                             "tcp-established\n");
    SECTION("a CRIU without the option: nothing is added") {
        const std::string text = "action-script /x/ferry-criu-action\n";
        write_text(conf, text);
        narrow_criu_config(conf, rpc_notify_option, rpc_notify_runc_without_hooks);
        CHECK(read_text(conf) == text);
    }
}

TEST_CASE("runc runs a bundle's hooks at setup-namespaces only for prestart and createRuntime",
          "[engine_request]") {
    auto runc_runs_hooks_in_restore = [](const char* spec) {
        return ferry::engines::runc_runs_hooks_in_restore(
            nlohmann::json::parse(spec, nullptr, false));
    };
    CHECK_FALSE(runc_runs_hooks_in_restore(R"({"ociVersion": "1.0.2", "process": {}})"));
    CHECK_FALSE(runc_runs_hooks_in_restore(R"({"hooks": {"prestart": []}})"));
    CHECK_FALSE(runc_runs_hooks_in_restore(R"({"hooks": {"poststart": [{"path": "/x"}]}})"));
    CHECK(runc_runs_hooks_in_restore(R"({"hooks": {"prestart": [{"path": "/x"}]}})"));
    CHECK(runc_runs_hooks_in_restore(R"({"hooks": {"createRuntime": [{"path": "/x"}]}})"));
    // Unreadable: runc keeps the notification, as without the option.
    CHECK(runc_runs_hooks_in_restore("{not json"));
    CHECK(runc_runs_hooks_in_restore(""));
}
