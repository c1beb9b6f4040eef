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


async def send(dut, byte, stop=1):
    for bit in [0] + [(byte >> i) & 1 for i in range(8)] + [stop]:
        dut.rx.value = bit
        await ClockCycles(dut.clk, 4)
    dut.rx.value = 1
    await ClockCycles(dut.clk, 6)


@cocotb.test()
async def frames(dut):
    await start(dut, rx=1)
    await ClockCycles(dut.clk, 3)
    dut.rx.value = 0          # glitch: too short for a start bit
    await RisingEdge(dut.clk)
    dut.rx.value = 1
    await ClockCycles(dut.clk, 6)
    await send(dut, 0x5A)
    await send(dut, 0xC3, stop=0)
