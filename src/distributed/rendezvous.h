// The join step every rank takes through the rendezvous store before the process group forms:
// each rank counts itself in and states its WORLD_SIZE; then each waits, up to the timeout,
// until every rank has. What can go wrong ends in one line saying what to do:
//   - a rank never comes (wrong WORLD_SIZE, a rank that was not started or died early):
//     "rank(s) 2 of 3 did not join ..." naming the missing ranks;
//   - ranks disagree on WORLD_SIZE: both values are named;
//   - the store already holds a complete job (a stale job still serving MASTER_PORT): named as
//     such, instead of silently joining the old job's keys.
// Gloo would otherwise only say that its own keys did not appear in time.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "distributed/world.h"

namespace c10d {
class Store;
}

namespace ddpx::dist {

// `where` names the store in messages ("127.0.0.1:29500" or "the file /tmp/x").
void join_rendezvous(c10d::Store& store, const WorldInfo& world, std::chrono::milliseconds timeout,
                     const std::string& where);

// make_store() then join_rendezvous() with what is left of `timeout`, on a helper thread that
// is abandoned after timeout + kDeadlineMargin. Why: a TCPStore client may wait for an
// answer without a deadline (libtorch 1.13's did; the guard stays on 2.11), so a program on
// MASTER_PORT that accepts connections and never answers (another service, a hung job) would block
// the rank forever. The abandoned thread stays blocked until that program closes the connection;
// the error ends the process.
constexpr auto kDeadlineMargin = std::chrono::seconds(2);
std::shared_ptr<c10d::Store> rendezvous_with_deadline(
    const std::function<std::shared_ptr<c10d::Store>()>& make_store, const WorldInfo& world,
    std::chrono::milliseconds timeout, const std::string& where);

}  // namespace ddpx::dist
