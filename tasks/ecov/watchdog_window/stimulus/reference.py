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


async def kick_at_phase(dut, phase):
    """Kick on the rising edge where the watchdog shows `phase` (driven at falling edges)."""
    await FallingEdge(dut.clk)
    while int(dut.phase.value) != phase:
        await FallingEdge(dut.clk)
    dut.kick.value = 1
    await FallingEdge(dut.clk)
    dut.kick.value = 0


@cocotb.test()
async def window_edges_then_early(dut):
    await start(dut, kick=0)
    await kick_at_phase(dut, 10)    # first cycle of the window
    await kick_at_phase(dut, 20)    # last cycle of the window
    await kick_at_phase(dut, 9)     # one cycle too early: fault
    await ClockCycles(dut.clk, 3)
    assert int(dut.early.value) == 1


@cocotb.test()
async def late_kick(dut):
    await start(dut, kick=0)
    await kick_at_phase(dut, 21)    # one cycle too late: fault
    await ClockCycles(dut.clk, 3)
    assert int(dut.late.value) == 1


@cocotb.test()
async def timeout(dut):
    await start(dut, kick=0)
    await ClockCycles(dut.clk, 40)
    assert int(dut.late.value) == 1
