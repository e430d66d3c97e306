// The expedited grace periods' hold (lib/sys/expedited_rcu.hpp), on files
// that stand in for /sys/kernel/rcu_expedited and rcu_normal: it sets 1
// over a 0 and puts the 0 back at the last release or at its limit; it
// leaves a host that already expedites, or never does, as it is; and a
// daemon that died holding has the value put back at its next start. The
// real knob is changed by integration-live-network-*, which check the
// daemon's report of it.
#include "sys/expedited_rcu.hpp"

#include "temp_dir.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <fstream>
#include <thread>

using namespace ferry;
using namespace std::chrono_literals;

namespace {

std::string read(const std::filesystem::path& p) {
    std::ifstream in(p);
    std::string v;
    in >> v;
    return v;
}

void write(const std::filesystem::path& p, const std::string& v) {
    std::ofstream(p) << v << "\n";
}

struct fake_knob {
    test::temp_dir dir{"ferry-rcu"};
    expedited_rcu::knob k;
    explicit fake_knob(const std::string& value, const std::string& normal = "0") {
        k.value = dir.path / "rcu_expedited";
        k.normal = dir.path / "rcu_normal";
        k.saved = dir.path / "rcu_expedited.saved";
        write(k.value, value);
        write(k.normal, normal);
    }
};

} // namespace

TEST_CASE("holds set 1 over a 0 and the last release puts the 0 back", "[expedited_rcu]") {
    fake_knob f("0");
    {
        expedited_rcu::hold first(f.k, 10s);
        CHECK(first.state() == "held");
        CHECK(read(f.k.value) == "1");
        CHECK(read(f.k.saved) == "0"); // on disk while held, for recover()
        {
            expedited_rcu::hold second(f.k, 10s);
            CHECK(second.state() == "held");
        }
        CHECK(read(f.k.value) == "1"); // the first still holds
    }
    CHECK(read(f.k.value) == "0");
    CHECK_FALSE(std::filesystem::exists(f.k.saved));
}

TEST_CASE("a hold lapses at its limit", "[expedited_rcu]") {
    fake_knob f("0");
    expedited_rcu::hold h(f.k, 50ms);
    CHECK(read(f.k.value) == "1");
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (read(f.k.value) != "0" && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(5ms);
    CHECK(read(f.k.value) == "0");
    CHECK(h.state() == "lapsed after its limit of 50 ms");
}

TEST_CASE("a host that already expedites, or never does, is left as it is", "[expedited_rcu]") {
    SECTION("already 1") {
        fake_knob f("1");
        {
            expedited_rcu::hold h(f.k, 10s);
            CHECK(h.state() == "already expedited on this host");
        }
        CHECK(read(f.k.value) == "1");
        CHECK_FALSE(std::filesystem::exists(f.k.saved));
    }
    SECTION("rcu_normal 1") {
        fake_knob f("0", "1");
        {
            expedited_rcu::hold h(f.k, 10s);
            CHECK(h.state().find("never expedites") != std::string::npos);
            CHECK(read(f.k.value) == "0");
        }
        CHECK(read(f.k.value) == "0");
    }
    SECTION("no knob") {
        fake_knob f("0");
        std::filesystem::remove(f.k.value);
        expedited_rcu::hold h(f.k, 10s);
        CHECK(h.state().find("cannot be read") != std::string::npos);
        CHECK_FALSE(std::filesystem::exists(f.k.value));
    }
}

TEST_CASE("a daemon that died holding has the value put back at its next start",
          "[expedited_rcu]") {
    fake_knob f("1");
    write(f.k.saved, "0"); // what a hold left behind when its process died
    CHECK(expedited_rcu::recover(f.k).find("put") != std::string::npos);
    CHECK(read(f.k.value) == "0");
    CHECK_FALSE(std::filesystem::exists(f.k.saved));
    CHECK(expedited_rcu::recover(f.k).empty()); // nothing left to do
}
