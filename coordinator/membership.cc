#include "coordinator/membership.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gasloc::coordinator {

Membership::Worker& Membership::Register(const v1::WorkerInfo& info,
                                         absl::Time now) {
  const uint64_t id = next_worker_id_++;
  Worker& w = workers_[id];
  w.stored.worker_id = id;
  w.stored.info = info;
  w.stored.registered_unix_ms = absl::ToUnixMillis(now);
  w.stored.state = v1::WORKER_STATE_ALIVE;
  Renew(w, now);
  idle_.insert(id);
  return w;
}

void Membership::Restore(std::vector<StoredWorker> workers, absl::Time now) {
  for (StoredWorker& sw : workers) {
    next_worker_id_ = std::max(next_worker_id_, sw.worker_id + 1);
    Worker w;
    w.stored = std::move(sw);
    if (w.stored.state == v1::WORKER_STATE_ALIVE) {
      // A fresh lease from restart time: workers keep their ids.
      w.lease_expiry = now + lease_;
      w.last_heartbeat = now;
      leases_.insert({w.lease_expiry, w.stored.worker_id});
    }
    workers_.emplace(w.stored.worker_id, std::move(w));
  }
}

void Membership::KeepLeasesOf(const Membership& previous) {
  for (auto& [id, w] : workers_) {
    auto old = previous.workers_.find(id);
    if (old == previous.workers_.end()) continue;
    if (w.stored.state == v1::WORKER_STATE_ALIVE) {
      leases_.erase({w.lease_expiry, id});
      leases_.insert({old->second.lease_expiry, id});
    }
    w.lease_expiry = old->second.lease_expiry;
    w.last_heartbeat = old->second.last_heartbeat;
    w.progress = old->second.progress;
  }
}

absl::StatusOr<Membership::Worker*> Membership::Live(uint64_t worker_id) {
  Worker* w = Find(worker_id);
  if (w == nullptr)
    return absl::NotFoundError(
        absl::StrCat("worker ", worker_id, " is not registered"));
  if (w->stored.state == v1::WORKER_STATE_DEAD)
    return absl::NotFoundError(absl::StrCat(
        "worker ", worker_id, " is dead (its lease expired); register again"));
  if (w->stored.state == v1::WORKER_STATE_LEFT)
    return absl::NotFoundError(absl::StrCat(
        "worker ", worker_id, " has left; register again"));
  return w;
}

Membership::Worker* Membership::Find(uint64_t worker_id) {
  auto it = workers_.find(worker_id);
  return it == workers_.end() ? nullptr : &it->second;
}

void Membership::Renew(Worker& w, absl::Time now) {
  leases_.erase({w.lease_expiry, w.stored.worker_id});
  w.lease_expiry = now + lease_;
  w.last_heartbeat = now;
  leases_.insert({w.lease_expiry, w.stored.worker_id});
}

Membership::Worker* Membership::ExpireNext(absl::Time now) {
  if (leases_.empty() || leases_.begin()->first > now) return nullptr;
  const uint64_t id = leases_.begin()->second;
  leases_.erase(leases_.begin());
  Worker& w = workers_.at(id);
  w.stored.state = v1::WORKER_STATE_DEAD;
  idle_.erase(id);
  return &w;
}

void Membership::Leave(Worker& w) {
  leases_.erase({w.lease_expiry, w.stored.worker_id});
  w.stored.state = v1::WORKER_STATE_LEFT;
  idle_.erase(w.stored.worker_id);
}

void Membership::SetJob(Worker& w, uint64_t job_id) {
  w.stored.job_id = job_id;
  if (job_id != 0 || w.stored.state != v1::WORKER_STATE_ALIVE) {
    idle_.erase(w.stored.worker_id);
  } else {
    idle_.insert(w.stored.worker_id);
  }
}

uint32_t Membership::lease_ms() const {
  return static_cast<uint32_t>(absl::ToInt64Milliseconds(lease_));
}

v1::WorkerStatus Membership::StatusOf(const Worker& w, absl::Time now) const {
  v1::WorkerStatus s;
  s.set_worker_id(w.stored.worker_id);
  *s.mutable_info() = w.stored.info;
  s.set_state(w.stored.state);
  *s.mutable_progress() = w.progress;
  if (w.stored.state == v1::WORKER_STATE_ALIVE)
    s.set_heartbeat_age_ms(static_cast<uint64_t>(
        absl::ToInt64Milliseconds(now - w.last_heartbeat)));
  s.set_registered_unix_ms(w.stored.registered_unix_ms);
  return s;
}

std::vector<Membership::Age> Membership::LiveAges(absl::Time now) const {
  // Every live worker holds exactly one lease.
  std::vector<Age> ages;
  ages.reserve(leases_.size());
  for (const auto& [expiry, id] : leases_)
    ages.push_back(
        {id, absl::ToDoubleSeconds(now - workers_.at(id).last_heartbeat)});
  std::sort(ages.begin(), ages.end(), [](const auto& a, const auto& b) {
    return a.worker_id < b.worker_id;
  });
  return ages;
}

}  // namespace gasloc::coordinator
