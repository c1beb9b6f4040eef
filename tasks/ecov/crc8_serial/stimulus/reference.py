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


@cocotb.test()
async def message_then_clear(dut):
    await start(dut, clear=0, bit_valid=0, din=0)
    dut.bit_valid.value = 1
    for byte in (0x31, 0x32, 0xC5):
        for i in range(8):
            dut.din.value = (byte >> (7 - i)) & 1
            await RisingEdge(dut.clk)
    dut.bit_valid.value = 0
    dut.clear.value = 1
    await RisingEdge(dut.clk)
    dut.clear.value = 0
    await ClockCycles(dut.clk, 2)
