"""Word pools and policies the retail generator draws from (written for envgym)."""

from __future__ import annotations

FIRST_NAMES = (
    "Ada", "Bruno", "Chen", "Dalia", "Emeka", "Farah", "Goran", "Hana", "Ivo", "Jun", "Kemal",
    "Lena", "Mateo", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tove", "Uma", "Viktor",
    "Wen", "Ximena", "Yusuf", "Zoe",
)
LAST_NAMES = (
    "Abara", "Berg", "Castillo", "Dubois", "Eriksen", "Fontaine", "Garcia", "Haddad", "Ito",
    "Jansen", "Kowalski", "Lindqvist", "Moreau", "Novak", "Okafor", "Petrov", "Quispe", "Rossi",
    "Sato", "Tanaka", "Udeh", "Varga", "Weber", "Yilmaz", "Zhou",
)
TIERS = (("standard", 0), ("silver", 5), ("gold", 10))  # (tier, discount percent)
REGIONS = ("north", "south", "east", "west")

# category -> (return window days, restocking fee percent, brands, (noun, min price, max price, grams))
CATEGORIES: dict[str, tuple[int, int, tuple[str, ...], tuple[tuple[str, int, int, int], ...]]] = {
    "electronics": (30, 15, ("Voltra", "Kestrel", "Nimbus", "Orbix", "Pylon"), (
        ("Wireless Earbuds", 39, 189, 60), ("Bluetooth Speaker", 29, 159, 650),
        ("USB-C Hub", 19, 79, 120), ("E-Reader", 89, 229, 190), ("Smart Plug", 12, 39, 90),
        ("Webcam", 35, 129, 160), ("Power Bank", 19, 89, 280))),
    "kitchen": (60, 0, ("Copperleaf", "Hearth & Co", "Saltbox", "Brava"), (
        ("Chef Knife", 25, 149, 220), ("Cast Iron Skillet", 29, 99, 2600), ("Pour-Over Kettle", 22, 89, 800),
        ("Spice Grinder", 15, 59, 400), ("Cutting Board", 14, 69, 1200), ("Dutch Oven", 49, 249, 4800))),
    "outdoor": (30, 10, ("Ridgeway", "Pinecrest", "Tundra Labs", "Wayfarer"), (
        ("Trail Backpack", 45, 199, 1300), ("Headlamp", 12, 59, 110), ("Camping Stove", 35, 139, 900),
        ("Trekking Poles", 29, 129, 520), ("Sleeping Pad", 39, 149, 700), ("Water Filter", 19, 79, 250))),
    "books": (14, 0, ("Inkwell Press", "Larkspur Books", "Meridian House"), (
        ("Field Guide to Birds", 12, 39, 600), ("Pasta Cookbook", 18, 45, 900),
        ("Astronomy Atlas", 25, 65, 1400), ("Poetry Anthology", 9, 29, 350), ("Chess Strategy", 14, 35, 450))),
    "toys": (30, 0, ("Playmoor", "Tinker Tots", "Bright Owl"), (
        ("Building Blocks", 19, 89, 1100), ("Puzzle 1000 pc", 12, 35, 700), ("Kite", 15, 49, 300),
        ("Wooden Train", 25, 99, 1500), ("Science Kit", 22, 79, 900))),
    "apparel": (60, 10, ("Northloom", "Fable & Fern", "Drift Supply", "Kinsale"), (
        ("Rain Jacket", 49, 229, 450), ("Merino Sweater", 45, 159, 380), ("Hiking Socks", 9, 29, 90),
        ("Canvas Tote", 14, 49, 250), ("Wool Beanie", 12, 39, 110), ("Trail Shorts", 25, 79, 220))),
    "beauty": (14, 20, ("Lumen Skin", "Petal & Pine", "Aurel"), (
        ("Face Serum", 18, 89, 80), ("Sunscreen SPF50", 9, 35, 120), ("Hair Oil", 12, 49, 110),
        ("Clay Mask", 14, 45, 150), ("Lip Balm Set", 6, 22, 60))),
    "office": (30, 15, ("Quillory", "Deskwright", "Ledger & Lamp"), (
        ("Fountain Pen", 19, 129, 40), ("Desk Lamp", 29, 119, 1400), ("Notebook Set", 9, 29, 500),
        ("Monitor Stand", 25, 99, 2100), ("Ergonomic Mouse", 22, 89, 130))),
}
VARIANTS = ("Classic", "Pro", "Lite", "Max", "Mini", "Plus", "Eco", "Studio", "Trail", "Prime")
HOUSE_BRANDS = ("Everyday Goods", "Harbor & Pine")  # sold in every category
