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
async def stall_and_drain(dut):
    await start(dut, in_valid=0, in_data=0, out_ready=1)
    dut.in_valid.value = 1
    for value, ready in ((1, 1), (2, 0), (3, 0), (4, 0), (5, 1), (6, 1)):
        dut.in_data.value = value
        dut.out_ready.value = ready
        await RisingEdge(dut.clk)
    dut.in_valid.value = 0
    dut.out_ready.value = 1
    await ClockCycles(dut.clk, 3)
