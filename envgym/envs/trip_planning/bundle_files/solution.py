"""Gold solutions for trip-planning tasks: a plan search that sees the world only through tools.

Cities never repeat and every hotel, restaurant and attraction belongs to one city, so days
only interact through the trip-wide budgets.  The search therefore takes the cheapest valid
day in each city and the cheapest valid leg between cities, and runs a depth-first search over
city sequences (nearest cities first when legs are constrained), pruning on the budgets.
Everything fetched is cached, so each tool is asked about each city or pair at most once.
"""

from __future__ import annotations

import json
from itertools import combinations


def solve_hangzhou_3day(tools, task: dict) -> None:
    """The seed's worked example (DeepSeek-V3.2 §3.2.3); same search as every other task."""
    solve_trip(tools, task)


def solve_trip(tools, task: dict) -> None:
    plan = _Search(tools, task["metadata"]).run()
    if plan is None:
        raise RuntimeError(f"no itinerary satisfies task {task.get('id')!r}")
    tools.submit_result(answer_text=json.dumps(plan, ensure_ascii=False))


def greedy_trip(tools, task: dict) -> None:
    """Greedy baseline (levels must need search): the cheapest option per item, no search.

    It honours the rules that concern one item at a time (rating floors, the ticket cap, the
    allowed legs) but never looks ahead: the first city it can reach, the cheapest hotel, the
    two cheapest restaurants, the cheapest attraction.  The conditional rules (budget tiers,
    weather, trip budgets) are what the levels add, so its solve rate measures how much search
    a level demands.
    """
    meta = task["metadata"]
    c = meta.get("constraints") or {}
    transport = c.get("transport")

    def ok(row: dict, floor_key: str) -> bool:
        return c.get(floor_key) is None or row["rating"] >= c[floor_key]

    def cheapest(rows: list, price: str, n: int = 1) -> list:
        # services are keyed by code, everything else by name
        return sorted(rows, key=lambda r: (r[price], r.get("name") or r.get("code")))[:n]

    days, city, visited = [], meta["start_city"], set()
    for n, date in enumerate(meta["dates"], 1):
        leg = None
        if n > 1:
            city, leg = None, None
            for dst in tools.get_all_cities():
                if dst in visited:
                    continue
                if not transport:
                    city = dst
                    break
                legs = [
                    s
                    for s in tools.get_inter_city_transport(from_city=days[-1]["city"], to_city=dst)
                    if s["mode"] in transport["modes"]
                    and (
                        transport.get("max_hours") is None
                        or s["duration_minutes"] <= transport["max_hours"] * 60
                    )
                    and (
                        transport.get("arrive_by") is None
                        or s["arrival_time"] <= transport["arrive_by"]
                    )
                ]
                if legs:
                    city, leg = dst, cheapest(legs, "price")[0]
                    break
            if city is None:
                break
        visited.add(city)
        hotels = cheapest(
            [h for h in tools.get_all_hotels_by_city(city=city) if ok(h, "hotel_min_rating")],
            "price_per_night",
        )
        meals = cheapest(
            [
                r
                for r in tools.get_all_restaurants_by_city(city=city)
                if ok(r, "restaurant_min_rating")
            ],
            "avg_price_per_person",
            2,
        )
        sights = cheapest(
            [
                a
                for a in tools.get_all_attractions_by_city(city=city)
                if ok(a, "attraction_min_rating")
                and (c.get("max_ticket") is None or a["ticket_price"] <= c["max_ticket"])
            ],
            "ticket_price",
        )
        if not hotels or len(meals) < 2 or not sights:
            break
        row = {
            "time": date,
            "city": city,
            "hotel": hotels[0]["name"],
            "afternoon_restaurant": meals[0]["name"],
            "afternoon_attraction": sights[0]["name"],
            "evening_restaurant": meals[1]["name"],
        }
        if transport:
            row["transport"] = leg["code"] if leg else None
        days.append(row)
    tools.submit_result(answer_text=json.dumps(days, ensure_ascii=False))


class _Search:
    def __init__(self, tools, meta: dict) -> None:
        self.tools = tools
        self.meta = meta
        self.c = meta.get("constraints") or {}
        self.transport = self.c.get("transport")
        self.weather_rule = self.c.get("weather")
        self.lists: dict = {}
        self.indoor: dict = {}
        self.days: dict = {}
        self.legs: dict = {}
        self.coords: dict = {}
        self.weather: dict = {}
        self.allowed: set = set()
        self.cities: list = []

    def run(self) -> list | None:
        self.cities = self.tools.get_all_cities()
        if not self.transport:
            self.allowed = set(self.cities)
            return self._extend([], [], 0, 0)
        # Legs must be short, so the plan most likely stays near the start: search the nearest
        # few cities first and widen the circle only when that fails (caches carry over).
        by_distance = self._nearest(self.meta["start_city"], self.cities)
        size = self.meta["days"] + 2
        while True:
            self.allowed = set(by_distance[:size])
            found = self._extend([], [], 0, 0)
            if found is not None or size >= len(by_distance):
                return found
            size += 3

    def _extend(self, days: list, legs: list, cost: int, fare: int) -> list | None:
        n = len(days)
        if n == self.meta["days"]:
            return self._answer(days, legs)
        if n == 0:
            candidates = [self.meta["start_city"]]
        else:
            visited = {d["city"] for d in days}
            candidates = self._nearest(
                days[-1]["city"], [c for c in self.cities if c not in visited and c in self.allowed]
            )
        budget, fare_cap = self.c.get("total_budget"), (self.transport or {}).get("budget")
        for city in candidates:
            if self._rain_blocks(city, n + 1):  # one cheap call that can rule the city out
                continue
            leg = None
            if n and self.transport:
                leg = self._leg(days[-1]["city"], city)
                if leg is None or (fare_cap is not None and fare + leg["price"] > fare_cap):
                    continue
            day = self._day(city, n + 1)
            if day is None or (budget is not None and cost + day["cost"] > budget):
                continue
            found = self._extend(
                days + [day], legs + [leg], cost + day["cost"], fare + (leg["price"] if leg else 0)
            )
            if found is not None:
                return found
        return None

    def _answer(self, days: list, legs: list) -> list:
        out = []
        for day, leg in zip(days, legs):
            row = {
                k: day[k]
                for k in (
                    "time",
                    "city",
                    "hotel",
                    "afternoon_restaurant",
                    "afternoon_attraction",
                    "evening_restaurant",
                )
            }
            if self.transport:
                row["transport"] = leg["code"] if leg else None
            out.append(row)
        return out

    def _nearest(self, here: str, cities: list) -> list:
        """Closest first when legs must be short; otherwise the order the tool gave."""
        if not self.transport:
            return cities
        for city in dict.fromkeys([here, *cities]):
            if city not in self.coords:
                info = self.tools.get_infos_by_city(
                    info_keywords=["latitude", "longitude"], city=city
                )
                self.coords[city] = (info["latitude"], info["longitude"])
        lat0, lon0 = self.coords[here]
        return sorted(
            cities, key=lambda c: (self.coords[c][0] - lat0) ** 2 + (self.coords[c][1] - lon0) ** 2
        )

    def _list(self, kind: str, city: str) -> list:
        key = (kind, city)
        if key not in self.lists:
            fetch = {
                "hotels": self.tools.get_all_hotels_by_city,
                "restaurants": self.tools.get_all_restaurants_by_city,
                "attractions": self.tools.get_all_attractions_by_city,
            }[kind]
            self.lists[key] = fetch(city=city)
        return self.lists[key]

    def _is_indoor(self, attraction: str) -> bool:
        if attraction not in self.indoor:
            info = self.tools.get_infos_by_attraction(
                info_keywords=["indoor"], attraction=attraction
            )
            self.indoor[attraction] = bool(info["indoor"])
        return self.indoor[attraction]

    def _rainy(self, city: str, date: str) -> bool:
        if not self.weather_rule:
            return False
        if (city, date) not in self.weather:
            report = self.tools.get_weather_by_city_date(city=city, date=date)
            self.weather[(city, date)] = (
                report["condition"] in self.weather_rule["rainy_conditions"]
            )
        return self.weather[(city, date)]

    def _rain_blocks(self, city: str, n: int) -> bool:
        return (
            bool(self.weather_rule)
            and self.weather_rule["rule"] == "avoid_rain"
            and self._rainy(city, self.meta["dates"][n - 1])
        )

    def _leg(self, src: str, dst: str) -> dict | None:
        if (src, dst) not in self.legs:
            t = self.transport
            ok = [
                s
                for s in self.tools.get_inter_city_transport(from_city=src, to_city=dst)
                if s["mode"] in t["modes"]
                and (t.get("max_hours") is None or s["duration_minutes"] <= t["max_hours"] * 60)
                and (t.get("arrive_by") is None or s["arrival_time"] <= t["arrive_by"])
            ]
            self.legs[(src, dst)] = min(ok, key=lambda s: (s["price"], s["code"]), default=None)
        return self.legs[(src, dst)]

    def _day(self, city: str, n: int) -> dict | None:
        if (city, n) not in self.days:
            self.days[(city, n)] = self._cheapest_day(city, n)
        return self.days[(city, n)]

    def _cheapest_day(self, city: str, n: int) -> dict | None:
        c, date = self.c, self.meta["dates"][n - 1]
        rainy = self._rainy(city, date)
        if rainy and self.weather_rule["rule"] == "avoid_rain":
            return None
        tiers = c.get("budget_tiers") or {}
        tiered = n in tiers.get("days", [])
        floor = c.get("restaurant_min_rating")
        restaurants = [
            r for r in self._list("restaurants", city) if floor is None or r["rating"] >= floor
        ]
        best = None
        for hotel in self._list("hotels", city):
            if c.get("hotel_min_rating") is not None and hotel["rating"] < c["hotel_min_rating"]:
                continue
            tier = None
            if tiered:
                price = hotel["price_per_night"]
                tier = next(
                    (
                        t
                        for t in tiers["tiers"]
                        if price >= t["min_price"]
                        and (t["max_price"] is None or price < t["max_price"])
                    ),
                    None,
                )
                if tier is None and tiers.get("require_tier"):
                    continue
            sight = self._attraction(city, rainy, (tier or {}).get("ticket_lt"))
            pair = self._restaurant_pair(restaurants, tier or {})
            if sight is None or pair is None:
                continue
            cost = (
                hotel["price_per_night"]
                + pair[0]["avg_price_per_person"]
                + pair[1]["avg_price_per_person"]
                + sight["ticket_price"]
            )
            if best is None or cost < best["cost"]:
                best = {
                    "time": date,
                    "city": city,
                    "hotel": hotel["name"],
                    "afternoon_restaurant": pair[0]["name"],
                    "afternoon_attraction": sight["name"],
                    "evening_restaurant": pair[1]["name"],
                    "cost": cost,
                }
        return best

    def _attraction(self, city: str, rainy: bool, ticket_lt) -> dict | None:
        c = self.c
        ok = sorted(
            (
                a
                for a in self._list("attractions", city)
                if (
                    c.get("attraction_min_rating") is None
                    or a["rating"] >= c["attraction_min_rating"]
                )
                and (c.get("max_ticket") is None or a["ticket_price"] <= c["max_ticket"])
                and (ticket_lt is None or a["ticket_price"] < ticket_lt)
            ),
            key=lambda a: (a["ticket_price"], a["name"]),
        )
        # Only a rainy day needs to know which attractions are indoors; ask lazily, cheapest first.
        return next((a for a in ok if not rainy or self._is_indoor(a["name"])), None)

    def _restaurant_pair(self, restaurants: list, tier: dict) -> tuple | None:
        best = None
        for a, b in combinations(restaurants, 2):
            total = a["avg_price_per_person"] + b["avg_price_per_person"]
            if (
                tier.get("restaurants_total_lt") is not None
                and total >= tier["restaurants_total_lt"]
            ):
                continue
            low, high = sorted((a["rating"], b["rating"]))
            if (
                tier.get("restaurants_all_min_rating") is not None
                and low < tier["restaurants_all_min_rating"]
            ):
                continue
            if (
                tier.get("restaurants_any_min_rating") is not None
                and high < tier["restaurants_any_min_rating"]
            ):
                continue
            if best is None or total < best[0]:
                best = (total, a, b)
        return None if best is None else (best[1], best[2])
