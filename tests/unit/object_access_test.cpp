// Pool objects belong to the peers of their migration.
#include "object_access.hpp"
#include "wire/pool_wire.hpp"

#include <catch2/catch.hpp>

using ferry::pagesrv::object_access;

TEST_CASE("a pooled object is served to its members only") {
    object_access acl;
    CHECK(acl.admit_read(7, "anyone"));  // nothing stored: nothing to protect
    CHECK(acl.admit_write(7, "source")); // the first writer is a member
    CHECK_FALSE(acl.admit_read(7, "bystander"));
    CHECK_FALSE(acl.admit_write(7, "bystander"));
    CHECK_FALSE(acl.grant(7, "bystander", "bystander")); // no letting oneself in
    CHECK(acl.grant(7, "source", "destination"));
    CHECK(acl.admit_read(7, "destination"));
    CHECK(acl.admit_write(7, "destination")); // a rebuild writes too
    CHECK(acl.grant(8, "parker", "parker"));  // a grant makes the first member
    CHECK_FALSE(acl.admit_read(8, "source"));
    acl.forget(7);
    CHECK(acl.admit_write(7, "bystander")); // dropped: a new object
    CHECK_FALSE(acl.admit_write(9, ""));    // unauthenticated: never
}

TEST_CASE("the grant frame carries the grantee's name and nothing else") {
    using namespace ferry::pool;
    request r{op::grant, 7, 0, 12, 0, 1};
    request back;
    REQUIRE(decode(encode(r), back) == decode_error::none);
    CHECK(back.operation == op::grant);
    CHECK(back.meta_len == 12);
    r.meta_len = 0;
    CHECK(decode(encode(r), back) == decode_error::bad_length);
    r.meta_len = 12;
    r.data_len = 4096;
    CHECK(decode(encode(r), back) == decode_error::bad_length);
    reply forbidden{status::forbidden, tier::none, 7, 0, 0, 0, 1};
    reply rb;
    REQUIRE(decode(encode(forbidden), rb) == decode_error::none);
    CHECK(rb.result == status::forbidden);
}
