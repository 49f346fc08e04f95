#include "cloud/provider.h"

#include <fstream>
#include <utility>

namespace trainq::cloud {

Result<std::string> Provider::LogTail(const std::string&, const std::string&, std::size_t) {
  return Fail(ErrorKind::kNotFound, "this provider keeps no machine log");
}

std::string TailBytes(const std::string& text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  std::string tail = text.substr(text.size() - max_bytes);
  auto nl = tail.find('\n');
  if (nl != std::string::npos && nl + 1 < tail.size()) tail = tail.substr(nl + 1);
  return tail;
}

Result<std::string> FileTail(const std::string& path, std::size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Fail(ErrorKind::kNotFound, "cannot read " + path);
  in.seekg(0, std::ios::end);
  auto size = static_cast<std::size_t>(std::max<std::streamoff>(0, in.tellg()));
  std::size_t want = std::min(size, max_bytes + 256);  // room to start at a line
  in.seekg(static_cast<std::streamoff>(size - want));
  std::string text(want, '\0');
  in.read(text.data(), static_cast<std::streamsize>(want));
  text.resize(static_cast<std::size_t>(in.gcount()));
  return TailBytes(text, max_bytes);
}

Result<std::string> FakeProvider::LogTail(const std::string& id, const std::string&,
                                          std::size_t max_bytes) {
  std::lock_guard lock(mu_);
  auto it = logs_.find(id);
  if (it == logs_.end()) return Fail(ErrorKind::kNotFound, "fake provider: no log for " + id);
  return TailBytes(it->second, max_bytes);
}

Status FakeProvider::MaybeFail(Call::Kind kind, const std::string& arg) {
  bool fail = fail_next_ > 0;
  if (fail) --fail_next_;
  calls_.push_back(Call{kind, arg, !fail});
  if (fail) return Fail(fail_kind_, "fake provider: injected failure");
  return {};
}

Result<std::string> FakeProvider::Boot(const BootSpec& spec) {
  std::lock_guard lock(mu_);
  TRY(MaybeFail(Call::Kind::kBoot, spec.tag.pool));
  std::string id = "m-" + std::to_string(next_id_++);
  machines_[id] = spec.tag;
  names_[id] = spec.name;
  return id;
}

Result<std::vector<ListedMachine>> FakeProvider::List(const MachineTag& tag) {
  std::lock_guard lock(mu_);
  TRY(MaybeFail(Call::Kind::kList, tag.pool));
  std::vector<ListedMachine> out;
  for (const auto& [id, t] : machines_) {
    if (t == tag) out.push_back(ListedMachine{id, t, names_.count(id) ? names_.at(id) : ""});
  }
  return out;
}

Status FakeProvider::Stop(const std::string& id) {
  std::lock_guard lock(mu_);
  TRY(MaybeFail(Call::Kind::kStop, id));
  if (machines_.erase(id) > 0) stopped_.push_back(id);
  return {};
}

void FakeProvider::FailNext(int n, ErrorKind kind) {
  std::lock_guard lock(mu_);
  fail_next_ = n;
  fail_kind_ = kind;
}

void FakeProvider::Lose(const std::string& id) {
  std::lock_guard lock(mu_);
  machines_.erase(id);
}

void FakeProvider::SetLog(const std::string& id, std::string text) {
  std::lock_guard lock(mu_);
  logs_[id] = std::move(text);
}

std::vector<FakeProvider::Call> FakeProvider::calls() const {
  std::lock_guard lock(mu_);
  return calls_;
}

std::vector<std::string> FakeProvider::stopped() const {
  std::lock_guard lock(mu_);
  return stopped_;
}

std::string FakeProvider::AddOrphan(const MachineTag& tag) {
  std::lock_guard lock(mu_);
  std::string id = "m-" + std::to_string(next_id_++);
  machines_[id] = tag;
  return id;
}

std::vector<std::string> FakeProvider::running() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& [id, t] : machines_) out.push_back(id);
  return out;
}

}  // namespace trainq::cloud
