#include "cloud/provider.h"

#include <utility>

namespace trainq::cloud {

Status FakeProvider::MaybeFail(Call::Kind kind, const std::string& arg) {
  bool fail = fail_next_ > 0;
  if (fail) --fail_next_;
  calls_.push_back(Call{kind, arg, !fail});
  if (fail) return Fail(fail_kind_, "fake provider: injected failure");
  return {};
}

Result<std::string> FakeProvider::Boot(const BootSpec& spec) {
  TRY(MaybeFail(Call::Kind::kBoot, spec.tag.pool));
  std::string id = "m-" + std::to_string(next_id_++);
  machines_[id] = spec.tag;
  names_[id] = spec.name;
  return id;
}

Result<std::vector<ListedMachine>> FakeProvider::List(const MachineTag& tag) {
  TRY(MaybeFail(Call::Kind::kList, tag.pool));
  std::vector<ListedMachine> out;
  for (const auto& [id, t] : machines_) {
    if (t == tag) out.push_back(ListedMachine{id, t, names_.count(id) ? names_.at(id) : ""});
  }
  return out;
}

Status FakeProvider::Stop(const std::string& id) {
  TRY(MaybeFail(Call::Kind::kStop, id));
  if (machines_.erase(id) > 0) stopped_.push_back(id);
  return {};
}

void FakeProvider::FailNext(int n, ErrorKind kind) {
  fail_next_ = n;
  fail_kind_ = kind;
}

void FakeProvider::Lose(const std::string& id) { machines_.erase(id); }

std::string FakeProvider::AddOrphan(const MachineTag& tag) {
  std::string id = "m-" + std::to_string(next_id_++);
  machines_[id] = tag;
  return id;
}

std::vector<std::string> FakeProvider::running() const {
  std::vector<std::string> out;
  for (const auto& [id, t] : machines_) out.push_back(id);
  return out;
}

}  // namespace trainq::cloud
