import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge, FallingEdge, Timer


async def start(dut, **idle):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    for name, value in idle.items():
        getattr(dut, name).value = value
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


def encode(d):
    d0, d1, d2, d3 = [(d >> i) & 1 for i in range(4)]
    p1, p2, p4 = d0 ^ d1 ^ d3, d0 ^ d2 ^ d3, d1 ^ d2 ^ d3
    bits = [p1, p2, d0, p4, d1, d2, d3]
    word = sum(b << i for i, b in enumerate(bits))
    return word | ((sum(bits) & 1) << 7)


@cocotb.test()
async def clean_single_double(dut):
    await start(dut, valid=0, code=0)
    dut.valid.value = 1
    for word in (encode(0xB), encode(0x6) ^ 0x10, encode(0x6) ^ 0x80, encode(0x9) ^ 0x05):
        dut.code.value = word
        await RisingEdge(dut.clk)
    dut.valid.value = 0
    await ClockCycles(dut.clk, 2)
