// alexop_runner: runs a TorchScript module or an AOTInductor package that calls
// torch.ops.alexop.conv11s4 in a C++ process with no Python.
//
//   alexop_runner [--library PATH] [--device cpu|cuda] script MODEL.pt INPUT.pt OUT.pt [--train]
//   alexop_runner [--library PATH] [--device cpu|cuda] aoti PACKAGE.pt2 INPUT.pt OUT.pt
//
// The alexop operators live in alexop's compiled library (Python:
// `alexop.library_path()`), which this program dlopen()s before loading any
// model: from --library, else the ALEXOP_LIBRARY environment variable, else the
// path baked in at build time (CMake cache variable ALEXOP_LIBRARY). Loading it
// runs its TORCH_LIBRARY static initialisers, which register alexop::conv11s4
// (CPU, CUDA, Meta, Autograd, Autocast) with this process's dispatcher.
//
// Tensors cross from/to Python as files: INPUT.pt is `torch.save(tensor, path)`
// read with torch::jit::pickle_load; OUT.pt is written with
// torch::jit::pickle_save and read in Python with `dict(torch.load(path))`:
// {"output": tensor} plus, with --train, "grad.input" and "grad.<parameter>"
// for loss = output.square().sum().

#include <dlfcn.h>

#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/cuda.h>
#include <torch/script.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#ifndef ALEXOP_DEFAULT_LIBRARY
#define ALEXOP_DEFAULT_LIBRARY ""
#endif

namespace {

const char* kUsage =
    "usage: alexop_runner [--library PATH] [--device cpu|cuda] script MODEL.pt INPUT.pt OUT.pt [--train]\n"
    "       alexop_runner [--library PATH] [--device cpu|cuda] aoti PACKAGE.pt2 INPUT.pt OUT.pt\n"
    "The alexop library comes from --library, else $ALEXOP_LIBRARY, else the build-time default;\n"
    "--library '' runs without it.\n";

// Returns the path loaded, or "" when none was asked for.
std::string load_alexop(const std::string* flag) {
  std::string path;
  if (flag != nullptr) {
    path = *flag;
  } else if (const char* env = std::getenv("ALEXOP_LIBRARY")) {
    path = env;
  } else {
    path = ALEXOP_DEFAULT_LIBRARY;
  }
  if (path.empty()) {
    std::fprintf(stderr, "alexop_runner: no alexop library to load; unless this program links it, alexop::* operators are not registered\n");
    return path;
  }
  // RTLD_GLOBAL so that the library's symbols (and those of libtorch it
  // resolves against) are shared with everything loaded later, e.g. the .so of
  // an AOTInductor package; RTLD_NOW so a missing symbol fails here, not mid-run.
  if (dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    throw std::runtime_error(std::string("could not load the alexop library: ") + dlerror());
  }
  return path;
}

torch::Tensor read_tensor(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::runtime_error("cannot open " + path);
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  torch::IValue value = torch::jit::pickle_load(bytes);
  if (!value.isTensor()) {
    throw std::runtime_error(path + " does not hold a tensor (write it with torch.save(tensor, path))");
  }
  return value.toTensor();
}

// A tuple of (name, tensor) pairs: torch.load(path) reads it with its default
// weights_only=True (a c10::Dict would carry a TorchScript type tag that needs
// weights_only=False); dict(torch.load(path)) gives the names back.
using Outputs = std::vector<std::pair<std::string, torch::Tensor>>;

void write_outputs(const std::string& path, const Outputs& outputs) {
  std::vector<torch::IValue> pairs;
  for (const auto& [name, tensor] : outputs) {
    pairs.push_back(c10::ivalue::Tuple::create({torch::IValue(name), torch::IValue(tensor)}));
  }
  std::vector<char> bytes = torch::jit::pickle_save(c10::ivalue::Tuple::create(std::move(pairs)));
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    throw std::runtime_error("cannot write " + path);
  }
}

void print_norm(const std::string& name, const torch::Tensor& t) {
  std::printf("%s norm %.9g\n", name.c_str(), t.detach().to(torch::kDouble).norm().item<double>());
}

// An alexop schema missing from the dispatcher means the library was not loaded.
std::string explain(const std::string& what) {
  if (what.find("alexop::") == std::string::npos) {
    return what;
  }
  return what +
      "\nalexop_runner: hint: the model calls alexop operators that are not registered in this process: "
      "load alexop's library (Python: alexop.library_path()) with --library PATH or ALEXOP_LIBRARY=PATH "
      "before loading the model";
}

int run_script(const std::string& model_path, const std::string& input_path, const std::string& out_path,
               const torch::Device& device, bool train) {
  torch::jit::Module module = torch::jit::load(model_path, device);
  torch::Tensor input = read_tensor(input_path).to(device);
  Outputs outputs;
  if (!train) {
    c10::InferenceMode guard;
    module.eval();
    torch::Tensor output = module.forward({input}).toTensor();
    print_norm("output", output);
    outputs.emplace_back("output", output.cpu());
  } else {
    module.train();
    input.requires_grad_(true);
    torch::Tensor output = module.forward({input}).toTensor();
    torch::Tensor loss = output.square().sum();
    loss.backward();  // through alexop's C++ autograd kernel
    print_norm("output", output);
    outputs.emplace_back("output", output.detach().cpu());
    print_norm("grad.input", input.grad());
    outputs.emplace_back("grad.input", input.grad().cpu());
    for (const auto& p : module.named_parameters(/*recurse=*/true)) {
      if (p.value.grad().defined()) {
        print_norm("grad." + p.name, p.value.grad());
        outputs.emplace_back("grad." + p.name, p.value.grad().cpu());
      }
    }
  }
  write_outputs(out_path, outputs);
  return 0;
}

int run_aoti(const std::string& package_path, const std::string& input_path, const std::string& out_path,
             const torch::Device& device) {
  c10::InferenceMode guard;
  torch::inductor::AOTIModelPackageLoader loader(package_path);
  torch::Tensor input = read_tensor(input_path).to(device);
  std::vector<torch::Tensor> results = loader.run({input});
  if (results.size() != 1) {
    throw std::runtime_error("expected a model with one output, got " + std::to_string(results.size()));
  }
  print_norm("output", results[0]);
  Outputs outputs;
  outputs.emplace_back("output", results[0].cpu());
  write_outputs(out_path, outputs);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string library;
  bool has_library = false;
  std::string device_name = "cpu";
  bool train = false;
  std::vector<std::string> positional;
  for (size_t i = 0; i < args.size(); ++i) {
    if ((args[i] == "--library" || args[i] == "--device") && i + 1 < args.size()) {
      if (args[i] == "--library") {
        library = args[++i];
        has_library = true;
      } else {
        device_name = args[++i];
      }
    } else if (args[i] == "--train") {
      train = true;
    } else if (args[i] == "-h" || args[i] == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else {
      positional.push_back(args[i]);
    }
  }
  if (positional.size() != 4 || (positional[0] != "script" && positional[0] != "aoti") ||
      (train && positional[0] != "script")) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  try {
    std::string loaded = load_alexop(has_library ? &library : nullptr);
    if (!loaded.empty()) {
      std::printf("loaded %s\n", loaded.c_str());
    }
    torch::Device device(device_name);
    if (device.is_cuda() && !torch::cuda::is_available()) {
      throw std::runtime_error("--device cuda: no CUDA device is available");
    }
    if (positional[0] == "script") {
      return run_script(positional[1], positional[2], positional[3], device, train);
    }
    return run_aoti(positional[1], positional[2], positional[3], device);
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "alexop_runner: error: %s\n", explain(e.what_without_backtrace()).c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "alexop_runner: error: %s\n", explain(e.what()).c_str());
    return 1;
  }
}
