// Checkpoints and resume through the real binaries: every failure mode must lose at most
// the work since the last checkpoint, never a checkpoint.
#include <signal.h>

#include <set>
#include <sstream>

#include "e2e_support.h"

using namespace e2e;

namespace {

int64_t last_step(const fs::path& out) {
  auto steps = series(out, "step");
  return steps.empty() ? 0 : int64_t(steps.back());
}

// Trains `cfg` twice on 2 workers: uninterrupted, and with a worker SIGKILLed as
// `die_at` says ("R:S") under --max-restarts 1. The second must resume from
// `resumed_from` (a checkpoint folder name) and end with the same model bytes.
void expect_killed_run_resumes_bit_identical(const std::string& name, const json& cfg, const std::string& die_at,
                                             const std::string& resumed_from) {
  auto clean = fresh_dir(name + "-clean"), killed = fresh_dir(name + "-killed");
  auto config = [&](const fs::path& out) {
    json c = cfg;
    c["output"]["dir"] = out.string();
    c["output"]["resume"] = "auto";
    return c;
  };
  auto r = train(clean, config(clean / "out"), 2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path file = write_config(killed, config(killed / "out"));
  r = run(launch_command(file, 2, "DDP_EMBED_TEST_DIE_AT_STEP=" + die_at, "--max-restarts 1"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(resumed_from), std::string::npos) << r.output;
  for (const char* f : {"final/model.safetensors", "final/2_Dense/model.safetensors"}) {
    const std::string a = read_file(clean / "out" / f), b = read_file(killed / "out" / f);
    EXPECT_FALSE(a.empty());
    EXPECT_TRUE(a == b) << f << ": the resumed run differs from the uninterrupted one";
  }
}

}  // namespace

// 2 workers, 20 steps, checkpoint every 5, dropout on: one worker SIGKILLed after step 12
// under --max-restarts 1 resumes from step 10 and ends with the same bytes as a run that
// was never interrupted.
// A restart helps a run that crashed, never one whose input is wrong: a batch that does
// not split over the workers ends the job at the first attempt, with embed-train's status
// for bad input (util/exit_status.h), its error quoted once in the report with its rank,
// and no restart spent, however many --max-restarts allows.
TEST(Restarts, AConfigThatCannotTrainEndsTheJobWithoutARestart) {
  const auto d = fresh_dir("bad-input-no-restart");
  json c = tiny_config(d / "out");
  c["train"]["batch_size"] = 3;  // over 2 workers
  const auto r = run(launch_command(write_config(d, c), 2, "", "--max-restarts 3"));
  EXPECT_EQ(r.exit_code, 78) << r.output;
  EXPECT_NE(r.output.find("not restarting: rank "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("its input is wrong"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("restarting all"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("attempt 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| embed-train: error: train.batch_size (3) must be divisible by WORLD_SIZE (2)"),
            std::string::npos)
      << r.output;
  // And a crash is still restarted (the control): a worker killed at its first step.
  const auto crashed = run(launch_command(write_config(d, tiny_config(d / "out2")), 2,
                                          "DDP_EMBED_TEST_DIE_AT_STEP=1:1", "--max-restarts 1"));
  EXPECT_NE(crashed.output.find("restarting all"), std::string::npos) << crashed.output;
}

TEST(Resume, KilledWorkerRestartsAndEndsBitIdentical) {
  json c = tiny_config("unused");
  c["model"]["dropout"] = 0.1;  // the dropout masks must resume exactly too
  c["train"]["max_steps"] = 20;
  c["output"]["save_every"] = 5;
  expect_killed_run_resumes_bit_identical("resume", c, "1:12", "step-10");
}

// The same with bf16 autocast and activation checkpointing: both resume exactly (the
// recomputation's dropout masks come from the restored generator, like the forward's).
TEST(Resume, Bf16WithActivationCheckpointingResumesBitIdentical) {
  json c = tiny_config("unused");
  c["model"]["dropout"] = 0.1;
  c["train"]["max_steps"] = 8;
  c["train"]["precision"] = "bf16";
  c["train"]["activation_checkpointing"] = true;
  c["output"]["save_every"] = 3;
  expect_killed_run_resumes_bit_identical("resume-bf16", c, "0:5", "step-3");
}

// A worker killed while rank 0 writes a checkpoint (slowed by a test-only pause between
// files): the half-written folder never counts; the next start resumes from the previous
// complete checkpoint.
TEST(Resume, KillDuringCheckpointWriteFallsBackToThePreviousOne) {
  auto d = fresh_dir("resume-midwrite");
  json c = tiny_config(d / "out");
  c["train"]["max_steps"] = 1000;
  c["output"]["save_every"] = 5;
  c["output"]["resume"] = "auto";
  const fs::path cfg = write_config(d, c);
  const fs::path ckpts = d / "out" / "checkpoints";
  pid_t launcher = spawn(launch_command(cfg, 2, "DDP_EMBED_TEST_CHECKPOINT_PAUSE_MS=1500"), d / "first.log");
  // Wait until step-5 is complete and step-10 is being written, then SIGKILL the writer.
  fs::path partial;
  ASSERT_TRUE(wait_for([&] {
    if (!fs::exists(ckpts / "step-5")) return false;
    partial = partial_checkpoint(ckpts, 10);
    return !partial.empty();
  })) << read_file(d / "first.log");
  const pid_t writer = std::stoi(partial.filename().string().substr(std::string("step-10.tmp-").size()));
  ::kill(writer, SIGKILL);
  EXPECT_EQ(wait_exit(launcher), 137) << read_file(d / "first.log");
  EXPECT_FALSE(fs::exists(ckpts / "step-10")) << "an incomplete checkpoint was published";

  c["train"]["max_steps"] = 7;
  write_config(d, c);
  auto r = run(launch_command(cfg, 2));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from " + (ckpts / "step-5").string()), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(ckpts / "step-7"));
  EXPECT_FALSE(fs::exists(partial)) << "the half-written folder was not cleaned up";
}

// Resume at another world size (2 -> 1): the run continues at the right global batch, and
// over the epoch every pair is trained on exactly once.
TEST(Resume, DifferentWorldSizeContinuesAtTheRightSample) {
  auto d = fresh_dir("resume-world");
  // 160 pairs, global batch 16: one epoch is 10 steps.
  const fs::path data = d / "train.jsonl";
  {
    std::ifstream in(kBin + "/test-data/train.jsonl");
    std::ofstream out(data);
    std::string line;
    for (int i = 0; i < 160 && std::getline(in, line); ++i) out << line << "\n";
  }
  json c = tiny_config(d / "out");
  c["data"]["train"] = data.string();
  c["train"]["max_steps"] = -1;
  c["train"]["epochs"] = 1;
  c["output"]["save_every"] = 2;
  c["output"]["resume"] = "auto";
  const fs::path cfg = write_config(d, c);
  const fs::path log1 = d / "samples1", log2 = d / "samples2";
  auto r = run(launch_command(cfg, 2, "DDP_EMBED_TEST_DIE_AT_STEP=0:5 DDP_EMBED_TEST_SAMPLE_LOG=" + log1.string()));
  ASSERT_EQ(r.exit_code, 137) << r.output;
  // 1 worker with 2 accumulation steps: the same micro-batches as before.
  r = run(launch_command(cfg, 1, "DDP_EMBED_TEST_SAMPLE_LOG=" + log2.string()) + " --set train.grad_accum_steps=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("written at world size 2, now 1"), std::string::npos) << r.output;

  // The first run saved step 4 and died after step 5 (whose samples, and maybe a few of
  // step 6's, were logged but never saved): count its steps 1-4, then the second run's,
  // which must start at step 5.
  std::multiset<int64_t> seen;
  int64_t first_resumed_step = -1;
  auto collect = [&](const fs::path& log, int64_t up_to_step) {
    for (const char* rank_file : {".rank0", ".rank1"}) {
      std::ifstream in(log.string() + rank_file);
      std::string line;
      while (std::getline(in, line)) {
        std::istringstream fields(line);
        int64_t step, rank, index;
        fields >> step >> rank;
        if (step > up_to_step) continue;
        if (&log == &log2 && (first_resumed_step < 0 || step < first_resumed_step)) first_resumed_step = step;
        while (fields >> index) seen.insert(index);
      }
    }
  };
  collect(log1, 4);
  collect(log2, 1000);
  EXPECT_EQ(first_resumed_step, 5);
  ASSERT_EQ(seen.size(), 160u) << "samples trained on: not exactly one epoch";
  for (int64_t i = 0; i < 160; ++i) EXPECT_EQ(seen.count(i), 1u) << "pair " << i;
}

// A corrupt checkpoint is refused with the file named, and `auto` falls back to the
// previous one.
TEST(Resume, CorruptCheckpointIsRefusedAndAutoFallsBack) {
  auto d = fresh_dir("resume-corrupt");
  json c = tiny_config(d / "out");
  c["train"]["max_steps"] = 10;
  c["output"]["save_every"] = 5;
  c["output"]["resume"] = "auto";
  auto r = train(d, c, 1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path bad = d / "out" / "checkpoints" / "step-10" / "model.safetensors";
  {
    std::fstream f(bad, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x7f');
  }
  c["train"]["max_steps"] = 12;
  r = train(d, c, 1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(bad.string() + ": checksum does not match"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resumed from " + (d / "out" / "checkpoints" / "step-5").string()), std::string::npos)
      << r.output;

  // Asked for by path, a corrupt checkpoint is an error, not a silent fresh start.
  const fs::path newest = d / "out" / "checkpoints" / "step-12";
  {
    std::fstream f(newest / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x7f');
  }
  c["output"]["resume"] = newest.string();
  c["output"]["dir"] = (d / "other").string();
  r = train(d, c, 1);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("model.safetensors"), std::string::npos) << r.output;
}

// SIGTERM to the launcher (a preemption): the workers finish the step, checkpoint and
// exit 0; the next start continues from there.
TEST(Resume, SigtermCheckpointsAndExitsZero) {
  auto d = fresh_dir("resume-sigterm");
  json c = tiny_config(d / "out");
  c["train"]["max_steps"] = 100000;
  c["output"]["save_every"] = 0;
  c["output"]["resume"] = "auto";
  const fs::path cfg = write_config(d, c);
  pid_t launcher = spawn(launch_command(cfg, 2), d / "first.log");
  ASSERT_TRUE(wait_for([&] { return last_step(d / "out") >= 3; })) << read_file(d / "first.log");
  ::kill(launcher, SIGTERM);
  EXPECT_EQ(wait_exit(launcher), 0) << read_file(d / "first.log");
  auto ckpts = fs::path(d / "out" / "checkpoints");
  int64_t saved = -1;
  for (auto& e : fs::directory_iterator(ckpts)) saved = std::stoll(e.path().filename().string().substr(5));
  ASSERT_GE(saved, 3);

  c["train"]["max_steps"] = saved + 2;
  auto r = train(d, c, 2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from " + (ckpts / ("step-" + std::to_string(saved))).string()), std::string::npos)
      << r.output;
  EXPECT_EQ(last_step(d / "out"), saved + 2);
}

// A non-finite loss skips the step with a warning; max_bad_steps in a row stop the run
// with an error naming the step, and the last good checkpoint stays.
// output.keep_best on 2 workers, evaluating every step: a worker SIGKILLed after step 6
// restarts from the checkpoint of step 4; the best kept before the kill stays the best
// unless a later evaluation beats it (best/'s record survives the resume), and final/ is the
// best evaluation's model, byte for byte, with the step and value metrics.jsonl shows.
TEST(Resume, KeepBestSurvivesAResumeAndIsTheFinalModel) {
  auto d = fresh_dir("keep-best");
  json c = tiny_config(d / "out");
  c["data"]["eval"] = kSrc + "/data/trecqa_beir";
  c["train"]["max_steps"] = 7;
  c["train"]["lr"] = 3e-3;
  c["output"]["eval_every"] = 1;
  c["output"]["save_every"] = 4;
  c["output"]["resume"] = "auto";
  c["output"]["keep_best"] = "eval/trecqa_beir/ndcg@10";
  auto r = run(launch_command(write_config(d, c), 2, "DDP_EMBED_TEST_DIE_AT_STEP=1:6", "--max-restarts 1"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("output.keep_best: the best so far is step"), std::string::npos) << r.output;

  // The best of every evaluation metrics.jsonl holds (steps 5 and 6 twice: before the kill
  // and again after the resume), the earliest on a tie.
  double best = -1;
  int64_t best_step = -1;
  for (const json& line : metric_lines(d / "out"))
    if (line.contains("eval/trecqa_beir/ndcg@10") && line["eval/trecqa_beir/ndcg@10"].get<double>() > best) {
      best = line["eval/trecqa_beir/ndcg@10"].get<double>();
      best_step = line["step"].get<int64_t>();
    }
  std::ifstream in(d / "out" / "best" / "embed_train.json");
  const json record = json::parse(in);
  EXPECT_EQ(record["keep_best"]["metric"], "eval/trecqa_beir/ndcg@10");
  EXPECT_EQ(record["step"].get<int64_t>(), best_step) << record.dump();
  EXPECT_DOUBLE_EQ(record["keep_best"]["value"].get<double>(), best) << record.dump();
  const std::string kept = read_file(d / "out" / "best" / "model.safetensors");
  EXPECT_FALSE(kept.empty());
  EXPECT_TRUE(kept == read_file(d / "out" / "final" / "model.safetensors")) << "final/ is not the best model";
  EXPECT_NE(r.output.find("is the model of step " + std::to_string(best_step)), std::string::npos) << r.output;
}

namespace {

// A keep_best run (one worker, an evaluation and a checkpoint every step) SIGKILLed at its
// first new best from step 3 on, between best -> best.old and best.tmp -> best. Returns
// its config (output.resume auto) with the kill's state checked: best.tmp and best.old,
// no best/. (On the demo's held-out pairs this run's ndcg@10 rises from step 2 to 5.)
json killed_between_best_renames(const fs::path& d) {
  json c = tiny_config(d / "out");
  c["data"]["eval"] = kBin + "/test-data/eval.jsonl";
  c["train"]["max_steps"] = 7;
  c["train"]["lr"] = 3e-3;
  c["output"]["eval_every"] = 1;
  c["output"]["save_every"] = 1;
  c["output"]["resume"] = "auto";
  c["output"]["keep_best"] = "eval/ndcg@10";
  const auto r = train(d, c, 1, "DDP_EMBED_TEST_DIE_BETWEEN_BEST_RENAMES=3");
  EXPECT_NE(r.exit_code, 0) << "no new best from step 3 on, so no kill:\n" << r.output;
  EXPECT_TRUE(fs::exists(d / "out" / "best.tmp")) << r.output;
  EXPECT_TRUE(fs::exists(d / "out" / "best.old")) << r.output;
  EXPECT_FALSE(fs::exists(d / "out" / "best")) << "the kill did not come between the renames";
  return c;
}

json best_record(const fs::path& folder) { return json::parse(read_file(folder / "embed_train.json")); }

}  // namespace

// The kill between keep_best's renames left a complete best.tmp (it beat best.old at its
// evaluation): the resumed run finishes the replacement, saying so, and goes on from that
// best, so no evaluation up to its step becomes the best again; at the end best/ is the
// best of every evaluation metrics.jsonl holds, before the kill too, and final/ is its model.
TEST(Resume, AKeepBestReplacementKilledBetweenItsRenamesIsFinishedOnResume) {
  auto d = fresh_dir("keep-best-finish");
  const json c = killed_between_best_renames(d);
  const int64_t winner = best_record(d / "out" / "best.tmp")["step"].get<int64_t>();
  const auto r = train(d, c, 1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("found an interrupted replacement of " + (d / "out" / "best").string() + ": " +
                          (d / "out" / "best.tmp").string() + " is complete, so it is the best"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("the best so far is step " + std::to_string(winner) + " "), std::string::npos) << r.output;
  for (int64_t step = 1; step <= winner; ++step)
    EXPECT_EQ(r.output.find("output.keep_best: step " + std::to_string(step) + " is the best so far"),
              std::string::npos)
        << "a resumed evaluation of step " << step << " became the best:\n" << r.output;
  EXPECT_FALSE(fs::exists(d / "out" / "best.tmp"));
  EXPECT_FALSE(fs::exists(d / "out" / "best.old"));
  double best = -1;
  int64_t best_step = -1;
  for (const json& line : metric_lines(d / "out"))
    if (line.contains("eval/ndcg@10") && line["eval/ndcg@10"].get<double>() > best) {
      best = line["eval/ndcg@10"].get<double>();
      best_step = line["step"].get<int64_t>();
    }
  const json record = best_record(d / "out" / "best");
  EXPECT_EQ(record["step"].get<int64_t>(), best_step) << record.dump();
  EXPECT_DOUBLE_EQ(record["keep_best"]["value"].get<double>(), best) << record.dump();
  EXPECT_TRUE(read_file(d / "out" / "best" / "model.safetensors") ==
              read_file(d / "out" / "final" / "model.safetensors"));
}

// The same kill, but best.tmp incomplete (its manifest, written last, missing: as a kill
// while writing it leaves it): the resumed run removes it and puts best.old back, saying
// so, and goes on from that best.
TEST(Resume, AnIncompleteKeepBestReplacementIsRolledBackOnResume) {
  auto d = fresh_dir("keep-best-rollback");
  const json c = killed_between_best_renames(d);
  fs::remove(d / "out" / "best.tmp" / "manifest.json");
  const json previous = best_record(d / "out" / "best.old");
  const auto r = train(d, c, 1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find((d / "out" / "best.tmp").string() + " is incomplete ("), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("put " + (d / "out" / "best.old").string() + " back as the best"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("the best so far is step " + std::to_string(previous["step"].get<int64_t>()) + " "),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(d / "out" / "best.tmp"));
  EXPECT_FALSE(fs::exists(d / "out" / "best.old"));
  EXPECT_TRUE(fs::exists(d / "out" / "final" / "model.safetensors"));
}

// best/ damaged after its last evaluation (a byte flipped while the end's checkpoint is
// written, the last thing before final/): the run exits 78 naming the file, writes no
// final/, and says how to get the last step's model from that checkpoint; doing what it
// says writes final/.
TEST(Resume, ADamagedKeepBestIsNotMadeFinalAndTheErrorSaysWhatToDo) {
  auto d = fresh_dir("keep-best-damaged");
  json c = tiny_config(d / "out");
  c["data"]["eval"] = kSrc + "/data/trecqa_beir";
  c["train"]["max_steps"] = 3;
  c["output"]["save_every"] = 100;  // only the end's checkpoint
  c["output"]["keep_best"] = "eval/trecqa_beir/ndcg@10";
  const fs::path config = write_config(d, c);
  const pid_t launcher = spawn(launch_command(config, 1, "DDP_EMBED_TEST_CHECKPOINT_PAUSE_MS=1500"), d / "run.log");
  ASSERT_TRUE(wait_for([&] { return !partial_checkpoint(d / "out" / "checkpoints", 3).empty(); }))
      << read_file(d / "run.log");
  {
    const fs::path weights = d / "out" / "best" / "model.safetensors";
    std::fstream f(weights, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(std::streamoff(fs::file_size(weights) / 2));
    const char byte = char(f.peek());
    f.seekp(std::streamoff(fs::file_size(weights) / 2));
    f.put(char(byte ^ 0x55));
  }
  EXPECT_EQ(wait_exit(launcher), 78) << read_file(d / "run.log");
  const std::string log = read_file(d / "run.log");
  const std::string checkpoint = (d / "out" / "checkpoints" / "step-3").string();
  for (const std::string& says : {(d / "out" / "best" / "model.safetensors").string() + ": checksum does not match",
                                  std::string("final/ is not written"),
                                  "run again with --set output.keep_best= --set output.resume=" + checkpoint})
    EXPECT_NE(log.find(says), std::string::npos) << "does not say \"" << says << "\":\n" << log;
  EXPECT_FALSE(fs::exists(d / "out" / "final"));

  const auto r = run(launch_command(config, 1) + " --set output.keep_best= --set output.resume=" + checkpoint);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(d / "out" / "final" / "model.safetensors")) << r.output;
}

// A run killed while writing a line of metrics.jsonl leaves it without its newline: the
// resumed run cuts it off, saying so, and every line parses afterwards (the torn record is
// not joined to the next).
TEST(Resume, ATornLastLineOfMetricsIsDroppedOnResume) {
  auto d = fresh_dir("torn-metrics");
  json c = tiny_config(d / "out");
  c["train"]["max_steps"] = 4;
  c["output"]["save_every"] = 2;
  c["output"]["resume"] = "auto";
  ASSERT_EQ(train(d, c, 1).exit_code, 0);
  std::ofstream(d / "out" / "metrics.jsonl", std::ios::app) << R"({"step": 5, "loss": 0.12)";
  c["train"]["max_steps"] = 6;
  const auto r = train(d, c, 1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("metrics.jsonl: its last line was torn (24 bytes without a newline"), std::string::npos)
      << r.output;
  std::ifstream in(d / "out" / "metrics.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    EXPECT_TRUE(json::parse(line, nullptr, /*allow_exceptions=*/false).is_object()) << "line " << lines << ": " << line;
  }
  EXPECT_EQ(last_step(d / "out"), 6);
}

TEST(Resume, NonFiniteStepsAreSkippedThenStopTheRun) {
  auto d = fresh_dir("nan");
  json c = tiny_config(d / "out");
  c["train"]["max_steps"] = 8;
  c["train"]["max_bad_steps"] = 3;
  c["output"]["save_every"] = 2;
  auto r = train(d, c, 2, "DDP_EMBED_TEST_NAN_STEPS=3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step 3: non-finite"), std::string::npos) << r.output;
  EXPECT_EQ(last_step(d / "out"), 8);

  auto d2 = fresh_dir("nan-stop");
  c["output"]["dir"] = (d2 / "out").string();
  r = train(d2, c, 2, "DDP_EMBED_TEST_NAN_STEPS=5,6,7");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step 7: 3 non-finite steps in a row"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(d2 / "out" / "checkpoints" / "step-4"));
  EXPECT_NO_THROW(read_file(d2 / "out" / "checkpoints" / "step-4" / "manifest.json"));
  EXPECT_TRUE(fs::exists(d2 / "out" / "metrics.svg")) << "a failed run leaves its figure too";
}

// An output folder that cannot be written is found at start-up, before any training: a
// bad input (exit 78) named by output.dir, the path at fault and the system's reason, not
// in the logging library's words.
TEST(Resume, UnwritableOutputDirIsAnErrorAtStartUp) {
  auto d = fresh_dir("unwritable");
  std::ofstream(d / "a-file") << "not a folder";
  json c = tiny_config(d / "a-file" / "out");
  auto r = train(d, c, 1);
  EXPECT_EQ(r.exit_code, 78) << r.output;
  EXPECT_NE(r.output.find("output.dir \"" + (d / "a-file" / "out").string() + "\": " + (d / "a-file").string() +
                          " is a file, not a folder (Not a directory)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("Failed opening file"), std::string::npos) << r.output;
}

// A folder this user may not write in (chmod does not stop root, so as root it is skipped):
// the system's reason, Permission denied, with output.dir.
TEST(Resume, AnOutputDirInAReadOnlyFolderIsAnErrorAtStartUp) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes in a read-only folder";
  auto d = fresh_dir("read-only-parent");
  fs::create_directories(d / "ro");
  fs::permissions(d / "ro", fs::perms::owner_read | fs::perms::owner_exec);
  const auto r = train(d, tiny_config(d / "ro" / "out"), 1);
  fs::permissions(d / "ro", fs::perms::owner_all);
  EXPECT_EQ(r.exit_code, 78) << r.output;
  EXPECT_NE(r.output.find("output.dir \"" + (d / "ro" / "out").string() + "\": cannot create it in " +
                          (d / "ro").string() + ": Permission denied"),
            std::string::npos)
      << r.output;
}
