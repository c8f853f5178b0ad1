// The tiny trainer the train tests share: a 2-block, d 32 model on the
// shipped corpus (one step takes milliseconds), and a per-process temporary
// path for the checkpoints they write.
//
// Thread safety: functions of their arguments only.
#ifndef GASLOC_TESTS_WORKER_TRAIN_TINY_TRAINER_H_
#define GASLOC_TESTS_WORKER_TRAIN_TINY_TRAINER_H_

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "tests/support/test_corpus.h"
#include "worker/train/trainer.h"

namespace gasloc::testing {

// 2 layers, d_model 32, 2 heads, context 32, batch 4, one thread, seed 7,
// 5 warmup steps, 8 validation windows, 20 single-step rounds.
inline v1::JobSpec TinySpec() {
  v1::JobSpec spec;
  spec.set_name("tiny-trainer");
  spec.mutable_model()->set_layers(2);
  spec.mutable_model()->set_d_model(32);
  spec.mutable_model()->set_heads(2);
  spec.mutable_model()->set_context(32);
  spec.mutable_training()->set_batch(4);
  spec.mutable_training()->set_threads(1);
  spec.mutable_training()->set_seed(7);
  spec.mutable_training()->mutable_adamw()->set_warmup_steps(5);
  spec.mutable_data()->set_corpus_path(kTinyShakespeare);
  spec.mutable_data()->set_eval_windows(8);
  spec.mutable_stop()->set_max_rounds(20);
  spec.mutable_outer()->set_local_steps(1);
  return spec;
}

// A trainer of `spec` with the rest of `options`; null (and a test
// failure) when it cannot be created.
inline std::unique_ptr<Trainer> MakeTrainerOf(const v1::JobSpec& spec,
                                              TrainerOptions options = {}) {
  options.spec = spec;
  auto trainer = Trainer::Create(options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? std::move(*trainer) : nullptr;
}

// `name` in the temporary folder, suffixed with this process's id.
inline std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          (name + "." + std::to_string(::getpid())))
      .string();
}

}  // namespace gasloc::testing

#endif  // GASLOC_TESTS_WORKER_TRAIN_TINY_TRAINER_H_
