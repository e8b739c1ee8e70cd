# An example of what a model writes for "make me a sales workbook with a chart":
# pandas for the numbers, xlsxwriter for the workbook, matplotlib for a PNG chart.
#   file-agent run examples/sales_report.py --out out
import matplotlib.pyplot as plt
import pandas as pd

sales = pd.DataFrame(
    {
        "month": pd.date_range("2026-01-01", periods=12, freq="MS").strftime("%b"),
        "north": [120, 135, 150, 160, 158, 170, 182, 190, 185, 200, 214, 230],
        "south": [90, 95, 99, 110, 120, 118, 125, 140, 150, 149, 160, 171],
    }
)
sales["total"] = sales["north"] + sales["south"]

with pd.ExcelWriter(f"{output_dir}/sales.xlsx", engine="xlsxwriter") as writer:
    sales.to_excel(writer, sheet_name="Sales", index=False)
    sheet = writer.sheets["Sales"]
    chart = writer.book.add_chart({"type": "line"})
    for column, name in [(1, "north"), (2, "south")]:
        chart.add_series({"name": name, "categories": ["Sales", 1, 0, 12, 0],
                          "values": ["Sales", 1, column, 12, column]})
    sheet.insert_chart("F2", chart)

axes = sales.plot(x="month", y=["north", "south"], title="Sales by region, 2026")
axes.set_ylabel("units")
plt.tight_layout()
plt.savefig(f"{output_dir}/sales.png", dpi=120)
print(sales[["month", "total"]].to_string(index=False))
