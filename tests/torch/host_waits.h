// While it lives, collects the ATen ops of this thread that make a CUDA host wait for the
// device: an output whose size depends on the data (unique, nonzero, masked_select), a
// value read back (item), an explicit move to a device (.to(device): the host's data
// copied over), and whatever else the test names (a boolean index, say). On the CPU they
// cost nothing, so the tests of the losses observe the calls themselves.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/record_function.h>

namespace host_waits {

class HostWaits {
 public:
  explicit HostWaits(std::vector<std::string> also = {})
      : handle_(at::addThreadLocalCallback(at::RecordFunctionCallback(&HostWaits::seen).needsInputs(true))) {
    found().clear();
    extra() = std::move(also);
  }
  ~HostWaits() {
    at::removeCallback(handle_);
    extra().clear();
  }
  HostWaits(const HostWaits&) = delete;
  HostWaits& operator=(const HostWaits&) = delete;

  static std::vector<std::string>& found() {
    thread_local std::vector<std::string> ops;
    return ops;
  }
  // found(), as a message says it: "aten::item, aten::nonzero".
  static std::string said() {
    std::string s;
    for (const auto& n : found()) s += (s.empty() ? "" : ", ") + n;
    return s;
  }

 private:
  static std::vector<std::string>& extra() {
    thread_local std::vector<std::string> names;
    return names;
  }
  static std::unique_ptr<at::ObserverContext> seen(const at::RecordFunction& fn) {
    static const std::vector<std::string> data_dependent = {
        "aten::_unique",       "aten::_unique2",      "aten::unique_dim",       "aten::unique_consecutive",
        "aten::unique_dim_consecutive", "aten::nonzero", "aten::masked_select", "aten::_local_scalar_dense",
        "aten::item",          "aten::is_nonzero"};
    const std::string name = fn.name();
    bool waits = std::find(data_dependent.begin(), data_dependent.end(), name) != data_dependent.end() ||
                 std::find(extra().begin(), extra().end(), name) != extra().end();
    if (name == "aten::to" || name == "aten::_to_copy")
      for (const c10::IValue& input : fn.inputs()) waits = waits || input.isDevice();
    if (waits) found().push_back(name);
    return nullptr;
  }

  at::CallbackHandle handle_;
};

}  // namespace host_waits
