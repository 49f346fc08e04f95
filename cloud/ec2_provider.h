// The EC2 provider: EC2's query API (version 2016-11-15) over HttpClient,
// signed with AWS Signature Version 4 by libcurl.
//
//   Boot: RunInstances, one instance, tagged at launch (TagSpecification)
//         with trainq:pool, trainq:instance and Name = BootSpec::name, and
//         ClientToken = the name (a retried Boot does not launch twice).
//         UserData is a shell script that writes the pool token to the
//         --token-file of the worker argv (mode 0600) and execs the worker;
//         it installs nothing (the image must have trainq).
//   List: DescribeInstances filtered by both tags and state pending|running
//         (paginated with NextToken).
//   Stop: TerminateInstances (an instance id EC2 does not know is gone).
//
// A warm pool (on_stop: stop) stops instances instead (StopInstances: only
// their disks are billed), and Boot first restarts a stopped one of the pool:
// CreateTags Name=<new name>, ModifyInstanceAttribute UserData (the new
// worker command line), StartInstances; the id is then the old instance's.
// Its user data is a MIME multipart that makes cloud-init run the script at
// every boot.
//
// Parameters: region (required), image (AMI id, required), instance_type
// (required), subnet, security_groups (comma-separated ids), key_name,
// iam_instance_profile (name), market (on-demand | spot), max_price (spot),
// user_data_prefix (shell lines run before the token is written), endpoint
// (default https://ec2.<region>.amazonaws.com/), on_stop (terminate | stop),
// credentials_file (ini, as
// ~/.aws/credentials) with profile (default "default"); without it the
// environment's AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN.
// Errors: throttling, capacity and 5xx answers are kUnavailable (retryable);
// authentication and request errors are kInvalidArgument, with EC2's code
// and message.
#pragma once

#include <map>
#include <string>

#include "cloud/provider.h"
#include "core/http_client.h"

namespace trainq::cloud {

class Ec2Provider final : public Provider {
 public:
  // `params` must have been checked by MakeProvider.
  Ec2Provider(HttpClient* http, std::map<std::string, std::string> params);

  Result<std::string> Boot(const BootSpec& spec) override;
  Result<std::vector<ListedMachine>> List(const MachineTag& tag) override;
  Status Stop(const std::string& id) override;
  // GetConsoleOutput (Latest=true): the instance's serial console, where
  // cloud-init shows the user data and the worker's first lines.
  Result<std::string> LogTail(const std::string& id, const std::string& name,
                              std::size_t max_bytes) override;

  // The user-data script Boot sends (before base64).
  static std::string UserData(const BootSpec& spec, const std::string& prefix);
  // `script` wrapped so that cloud-init runs it at every boot (warm pools).
  static std::string WarmUserData(const std::string& script);

 private:
  using Form = std::vector<std::pair<std::string, std::string>>;
  Result<std::string> Call(const std::string& action, Form form);
  Result<std::vector<ListedMachine>> Describe(const MachineTag& tag,
                                              const std::vector<std::string>& states);
  // Warm pools: starts a stopped tagged instance as `spec`; "" when none.
  Result<std::string> StartStopped(const BootSpec& spec, const std::string& user_data);
  std::string Param(const std::string& key) const;

  HttpClient* http_;
  std::map<std::string, std::string> params_;
  std::string endpoint_;
};

std::string Base64Encode(std::string_view data);
// kCorruption on a character outside the alphabet; whitespace is skipped.
Result<std::string> DecodeBase64(std::string_view data);

}  // namespace trainq::cloud
