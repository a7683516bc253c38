__version__ = "0.1.0"

import logging as _logging


def _not_torchao_cpu_noise(record: _logging.LogRecord) -> bool:
    """False for the three messages that importing torchao (the optional `peers` extra of chapter 04) logs on a machine
    without CUDA, True for every other record. transformers, diffusers and peft import torchao whenever it is installed,
    so these would reach every chapter that uses them: torchao's own warning that its CUDA kernels (`_C_*.so`) do not
    load, torch's deprecation note on torchao's Enum pytree constants, and diffusers' note that torchao's
    checkpoint tensor types moved. The filters sit on those three loggers only; see the BAS chapter, *The low-bit peers*."""
    msg = record.getMessage()
    if record.name == "torchao":
        return not (msg.startswith("Failed to load ") and ".so" in msg)
    if record.name == "torch.utils._pytree":
        arg = record.args[0] if isinstance(record.args, tuple) and record.args else None
        return not (getattr(arg, "__module__", "").startswith("torchao") and "is an Enum subclass" in msg)
    return not msg.startswith("Unable to import `torchao` Tensor objects")


TORCHAO_CPU_NOISE_LOGGERS = ("torchao", "torch.utils._pytree", "diffusers.quantizers.torchao.torchao_quantizer")
for _name in TORCHAO_CPU_NOISE_LOGGERS:  # a filter on the logger that emits: other loggers and messages pass untouched
    _logging.getLogger(_name).addFilter(_not_torchao_cpu_noise)


BITSANDBYTES_CPU_NOISE = {  # logger -> the start of the one message it logs when bitsandbytes' CPU backend looks for a hub kernel
    "bitsandbytes.backends.cpu.ops": "Failed to load CPU gemm_4bit_forward from kernels-community",
    "kernels._internals.hf_hub": "Skipping publisher trust check for 'kernels-community/quantization-bitsandbytes'",
}


def _not_bitsandbytes_cpu_noise(record: _logging.LogRecord) -> bool:
    """False for the message bitsandbytes' CPU backend (through the `kernels` package) logs when it cannot fetch its 4-bit
    matmul kernel from a hub, online or offline (the book runs offline and never uses 4-bit matmuls; its 8-bit optimizer
    runs without that kernel), True for every other record."""
    return not record.getMessage().startswith(BITSANDBYTES_CPU_NOISE.get(record.name, "\0"))


for _name in BITSANDBYTES_CPU_NOISE:
    _logging.getLogger(_name).addFilter(_not_bitsandbytes_cpu_noise)
