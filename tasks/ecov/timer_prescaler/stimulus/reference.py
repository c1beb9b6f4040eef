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
async def reload_and_stop(dut):
    await start(dut, enable=0, auto_reload=1, irq_clear=0, prescale=1, compare=3)
    dut.enable.value = 1
    await ClockCycles(dut.clk, 20)
    dut.irq_clear.value = 1
    await RisingEdge(dut.clk)
    dut.irq_clear.value = 0
    dut.auto_reload.value = 0
    await ClockCycles(dut.clk, 20)
    dut.enable.value = 0
    await ClockCycles(dut.clk, 2)
