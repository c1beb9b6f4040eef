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
async def align_armed(dut):
    await start(dut, run=0, arm=0)
    dut.run.value = 1
    dut.arm.value = 1
    await ClockCycles(dut.clk, 40)
    dut.arm.value = 0               # an unarmed alignment
    await ClockCycles(dut.clk, 35)
    dut.arm.value = 1
    await ClockCycles(dut.clk, 35 * 16)   # saturate event_count
    dut.run.value = 0
    await ClockCycles(dut.clk, 2)
