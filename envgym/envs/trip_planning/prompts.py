"""Natural-English prompts for trip specs, in the voice of the seed's worked example."""

from __future__ import annotations

from datetime import date

from envgym.envs.trip_planning.constraints import BudgetTiers, Tier, TripSpec

# DeepSeek-V3.2 §3.2.3, "An Example of Synthesized Task: Trip Planning", verbatim.
SEED_PROMPT = (
    "I'm planning a three-day trip starting from Hangzhou, and I need help creating an itinerary "
    "from October 1st to October 3rd, 2025. A few important requirements: I don't want to repeat "
    "any cities, hotels, attractions, or restaurants during the entire trip. Also, please make sure "
    "that every hotel, restaurant, and attraction you recommend is actually located in the city "
    "where I'll be staying that day. One more thing about the second day - I'm trying to be smart "
    "about my budget. If I end up booking a luxury hotel that costs 800 CNY or more per night, then "
    "I need to be more careful with other expenses: my total spending on both restaurants (lunch "
    "and dinner) should stay under 350 CNY, both restaurants should be rated at least 4.0 stars, "
    "and the afternoon attraction ticket needs to be less than 120 CNY. If the hotel on day 2 is in "
    "the mid-to-high range (500-800 CNY), then I have a bit more flexibility - I just need to make "
    "sure at least one of my restaurant choices is rated 4.0 or higher, and the attraction ticket "
    "should be below 180 CNY. For more affordable hotels (200-500 CNY range), I only need to ensure "
    "that at least one restaurant has a rating of 3.2 or above. Can you help me put together this "
    "itinerary?"
)
_NUMBERS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven"}


def seed_prompt(spec: TripSpec) -> str:
    return SEED_PROMPT + "\n\n" + submit_format(spec, heading="Submit Result Format")


def render_prompt(spec: TripSpec) -> str:
    c = spec.constraints
    first, last = spec.dates[0], spec.dates[-1]
    parts = [
        f"I'm planning a {_NUMBERS.get(spec.days, str(spec.days))}-day trip starting from "
        f"{spec.start_city}, and I need help creating an itinerary from {_spoken(first, last)}. "
        f"I'll spend the first day in {spec.start_city} and a different city every day after "
        "that. A few important requirements: I don't want to repeat any cities, hotels, "
        "attractions, or restaurants during the entire trip. Also, please make sure that every "
        "hotel, restaurant, and attraction you recommend is actually located in the city where "
        "I'll be staying that day."
    ]
    if c.hotel_min_rating is not None:
        parts.append(f"Every hotel should have a rating of at least {c.hotel_min_rating}.")
    if c.restaurant_min_rating is not None:
        parts.append(f"I only eat at restaurants rated {c.restaurant_min_rating} or higher.")
    if c.attraction_min_rating is not None:
        parts.append(
            f"Every attraction should have a rating of at least {c.attraction_min_rating}."
        )
    if c.max_ticket is not None:
        parts.append(f"No attraction ticket should cost more than {c.max_ticket} CNY.")
    if c.budget_tiers is not None:
        parts.append(_tiers_text(c.budget_tiers))
    if c.total_budget is not None:
        parts.append(
            "Over the whole trip, the hotels, the meals (lunch and dinner, counted at each "
            "restaurant's average price per person) and the attraction tickets must add up to at "
            f"most {c.total_budget} CNY."
        )
    if c.weather is not None:
        rainy = _or_list(list(c.weather.rainy_conditions))
        if c.weather.rule == "rain_indoor":
            parts.append(
                f"If the forecast for the city I'm in on a given day is {rainy}, the "
                "afternoon attraction that day has to be indoors."
            )
        else:
            parts.append(
                "I don't want to spend a day anywhere it rains: don't put me in a city on "
                f"a day when its forecast is {rainy}."
            )
    if c.transport is not None:
        parts.append(_transport_text(spec))
    parts.append("Can you help me put together this itinerary?")
    return " ".join(parts) + "\n\n" + submit_format(spec)


def submit_format(spec: TripSpec, heading: str | None = None) -> str:
    rows = []
    for i, day in enumerate(spec.dates):
        extra = ""
        if spec.constraints.transport is not None:
            extra = ', "transport": null' if i == 0 else ', "transport": "service_code"'
        rows.append(
            f'{{ "time": "{day}", "city": "city_name", "hotel": "hotel_name", '
            '"afternoon_restaurant": "restaurant_name", "afternoon_attraction": "attraction_name", '
            f'"evening_restaurant": "restaurant_name"{extra} }}'
        )
    block = "```\n[\n" + ",\n".join(rows) + "\n]\n```"
    intro = (
        (heading + "\n\n")
        if heading
        else (
            "When the itinerary is ready, submit it with submit_result, passing answer_text as a JSON "
            "array with one object per day, in exactly this format:\n"
        )
    )
    tail = (
        "\nSubmit it by calling submit_result with this JSON array as answer_text; use the "
        "exact names the tools return."
    )
    return intro + block + tail


def _tiers_text(bt: BudgetTiers) -> str:
    days = _days_phrase(bt.days)
    lines = [f"About my budget on {days}:"]
    if bt.require_tier:
        lowest = min(t.min_price for t in bt.tiers)
        lines.append(f"I won't book a hotel under {lowest} CNY a night then.")
    for tier in bt.tiers:
        lines.append(_tier_sentence(tier))
    return " ".join(lines)


def _tier_sentence(t: Tier) -> str:
    band = (
        f"{t.min_price} CNY or more per night"
        if t.max_price is None
        else f"{t.min_price} CNY or more but under {t.max_price} CNY per night"
    )
    rules = []
    if t.restaurants_total_lt is not None:
        rules.append(
            "lunch and dinner together (average price per person) must cost less than "
            f"{t.restaurants_total_lt} CNY"
        )
    if t.restaurants_all_min_rating is not None:
        rules.append(f"both restaurants must be rated at least {t.restaurants_all_min_rating}")
    if t.restaurants_any_min_rating is not None:
        rules.append(
            f"at least one of the two restaurants must be rated "
            f"{t.restaurants_any_min_rating} or higher"
        )
    if t.ticket_lt is not None:
        rules.append(f"the afternoon attraction ticket must cost less than {t.ticket_lt} CNY")
    then = _and_list(rules) if rules else "anything goes"
    return f"If that day's hotel is in the {t.label} range ({band}), then {then}."


def _transport_text(spec: TripSpec) -> str:
    t = spec.constraints.transport
    assert t is not None
    text = (
        f"I'll move to the next city each morning on a single direct "
        f"{_or_list(list(t.modes))} (no changes)"
    )
    if t.max_hours is not None:
        text += f" that takes at most {t.max_hours:g} hours"
    if t.arrive_by is not None:
        text += f" and arrives by {t.arrive_by}"
    text += "."
    if t.budget is not None:
        text += f" All those tickets together must cost at most {t.budget} CNY."
    return text + (
        ' For each day, add a "transport" field with the code of the service that '
        "brings me there from the previous day's city, and null on the first day."
    )


def _days_phrase(days: tuple[int, ...]) -> str:
    if len(days) == 1:
        return f"day {days[0]}"
    return "each of days " + _and_list([str(d) for d in days])


def _and_list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _or_list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


def _spoken(first: str, last: str) -> str:
    a, b = date.fromisoformat(first), date.fromisoformat(last)
    start = f"{a.strftime('%B')} {_ordinal(a.day)}"
    end = f"{b.strftime('%B')} {_ordinal(b.day)}, {b.year}"
    return f"{start}{', ' + str(a.year) if a.year != b.year else ''} to {end}"


def _ordinal(n: int) -> str:
    suffix = "th" if 11 <= n % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
