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
async def both_modes(dut):
    await start(dut, start=0, cpol=0, tx_data=0, miso=0)
    for cpol, data in ((0, 0xA5), (1, 0x5A)):
        dut.cpol.value = cpol
        await RisingEdge(dut.clk)
        dut.tx_data.value = data
        dut.start.value = 1
        await RisingEdge(dut.clk)
        dut.start.value = 0
        for i in range(40):
            dut.miso.value = (i // 4) & 1
            await RisingEdge(dut.clk)
