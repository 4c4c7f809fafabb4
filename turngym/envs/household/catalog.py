"""What a household is made of: receptacle types, object types, rooms.

Plain data, no logic. The vocabulary follows ALFWorld (lower-case, one word per type:
``sinkbasin``, ``stoveburner``, ``desklamp``) so that prompts and agents written for ALFWorld
read these worlds without translation.

* A **receptacle type** says whether its instances open and close (a closed one hides its
  contents and accepts nothing), and which preposition describes its contents ("in" the
  fridge, "on" the countertop).
* An **object type** lists the receptacle types it is found in (also the goal receptacles
  a task may ask for) and whether it makes sense to clean, heat or cool it (which task types
  may target it). Objects can be taken; desk lamps cannot, they are switched on with ``use``.
* A **room** lists its receptacle types with ``(min, max)`` instance counts at difficulty 1;
  harder layouts add instances of the repeatable types (cabinets, drawers, shelves…).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "RecepType",
    "ObjType",
    "RECEPTACLES",
    "OBJECTS",
    "ROOMS",
    "LAMP_HOSTS",
    "APPLIANCE",
]


@dataclass(frozen=True, slots=True)
class RecepType:
    """A kind of receptacle.

    Attributes:
        name: ALFWorld's one-word name.
        openable: instances start closed and must be opened to see or use their contents.
        prep: "in" or "on", for descriptions ("In it, you see…" / "On the desk 1, you see…").
        repeat: how many extra instances each difficulty level above 1 may add.
    """

    name: str
    openable: bool = False
    prep: str = "on"
    repeat: int = 0


@dataclass(frozen=True, slots=True)
class ObjType:
    """A kind of takeable object.

    Attributes:
        name: ALFWorld's one-word name.
        found_in: receptacle types it starts in, and the goal receptacles tasks may name.
        rooms: the rooms it belongs in (distractors and targets are drawn from these).
        clean/heat/cool: whether pick-clean/heat/cool tasks may target it.
        lookable: whether examine-in-light tasks may target it.
    """

    name: str
    found_in: tuple[str, ...]
    rooms: tuple[str, ...]
    clean: bool = False
    heat: bool = False
    cool: bool = False
    lookable: bool = False


_R = RecepType
RECEPTACLES: dict[str, RecepType] = {
    r.name: r
    for r in (
        _R("fridge", openable=True, prep="in"),
        _R("microwave", openable=True, prep="in"),
        _R("sinkbasin", prep="in"),
        _R("stoveburner", repeat=1),
        _R("countertop", repeat=1),
        _R("cabinet", openable=True, prep="in", repeat=4),
        _R("drawer", openable=True, prep="in", repeat=4),
        _R("shelf", repeat=2),
        _R("diningtable"),
        _R("coffeemachine"),
        _R("garbagecan", prep="in"),
        _R("sidetable", repeat=1),
        _R("desk"),
        _R("dresser"),
        _R("bed"),
        _R("sofa"),
        _R("armchair", repeat=1),
        _R("coffeetable"),
        _R("tvstand"),
        _R("safe", openable=True, prep="in"),
        _R("bathtubbasin", prep="in"),
        _R("toilet"),
        _R("towelholder"),
        _R("handtowelholder"),
    )
}

_KITCHEN_FOOD = ("countertop", "diningtable", "fridge", "garbagecan", "sinkbasin", "microwave")
_DISHES = ("countertop", "cabinet", "diningtable", "shelf", "sinkbasin", "microwave", "fridge")
_UTENSILS = ("countertop", "drawer", "diningtable", "sinkbasin", "cabinet")
_SMALL_LIVING = ("desk", "sidetable", "dresser", "drawer", "shelf", "coffeetable")
_K, _LB, _T, _KT, _LBT = ("kitchen",), ("livingroom", "bedroom"), ("bathroom",), ("kitchen", "bathroom"), ("livingroom", "bedroom", "bathroom")
_O = ObjType
OBJECTS: dict[str, ObjType] = {
    o.name: o
    for o in (
        # kitchen
        _O("apple", _KITCHEN_FOOD, _K, clean=True, heat=True, cool=True),
        _O("bread", ("countertop", "diningtable", "fridge", "cabinet", "microwave"), _K, heat=True, cool=True),
        _O("egg", _KITCHEN_FOOD, _K, clean=True, heat=True, cool=True),
        _O("lettuce", ("countertop", "diningtable", "fridge", "garbagecan", "sinkbasin"), _K, clean=True, cool=True),
        _O("potato", _KITCHEN_FOOD, _K, clean=True, heat=True, cool=True),
        _O("tomato", _KITCHEN_FOOD, _K, clean=True, heat=True, cool=True),
        _O("mug", _DISHES + ("coffeemachine",), _K, clean=True, heat=True, cool=True),
        _O("cup", _DISHES, _K, clean=True, heat=True, cool=True),
        _O("plate", _DISHES, _K, clean=True, heat=True, cool=True),
        _O("bowl", _DISHES, _K, clean=True, heat=True, cool=True),
        _O("pan", ("stoveburner", "countertop", "cabinet", "diningtable", "sinkbasin", "fridge"), _K, clean=True, cool=True),
        _O("pot", ("stoveburner", "countertop", "cabinet", "diningtable", "sinkbasin", "fridge"), _K, clean=True, cool=True),
        _O("kettle", ("stoveburner", "countertop", "cabinet", "shelf", "sinkbasin"), _K, clean=True),
        _O("knife", _UTENSILS, _K, clean=True),
        _O("butterknife", _UTENSILS, _K, clean=True),
        _O("fork", _UTENSILS, _K, clean=True),
        _O("spoon", _UTENSILS, _K, clean=True),
        _O("spatula", _UTENSILS, _K, clean=True),
        _O("ladle", _UTENSILS, _K, clean=True),
        _O("winebottle", ("countertop", "cabinet", "diningtable", "fridge", "shelf", "garbagecan"), _K, cool=True),
        _O("saltshaker", ("countertop", "cabinet", "shelf", "drawer", "diningtable"), _K),
        _O("peppershaker", ("countertop", "cabinet", "shelf", "drawer", "diningtable"), _K),
        # living room / bedroom
        _O("book", ("desk", "sidetable", "bed", "shelf", "dresser", "drawer", "sofa", "coffeetable"), _LB, lookable=True),
        _O("cd", ("desk", "drawer", "shelf", "safe", "sidetable", "dresser", "garbagecan"), _LB, lookable=True),
        _O("cellphone", ("desk", "bed", "sidetable", "dresser", "drawer", "sofa"), _LB, lookable=True),
        _O("pen", _SMALL_LIVING, _LB, lookable=True),
        _O("pencil", _SMALL_LIVING, _LB, lookable=True),
        _O("keychain", ("sidetable", "dresser", "drawer", "safe", "coffeetable", "shelf"), _LB, lookable=True),
        _O("creditcard", ("desk", "sidetable", "dresser", "drawer", "coffeetable", "armchair"), _LB, lookable=True),
        _O("remotecontrol", ("sofa", "armchair", "coffeetable", "sidetable", "tvstand", "dresser"), _LB, lookable=True),
        _O("pillow", ("sofa", "armchair", "bed"), _LB, lookable=True),
        _O("laptop", ("desk", "bed", "sofa", "coffeetable", "diningtable"), _LB, lookable=True),
        _O("alarmclock", ("desk", "sidetable", "dresser", "shelf"), _LB, lookable=True),
        _O("statue", ("shelf", "coffeetable", "sidetable", "dresser", "tvstand", "diningtable"), _LB, lookable=True),
        _O("vase", ("shelf", "coffeetable", "sidetable", "dresser", "tvstand", "diningtable"), _LB, lookable=True),
        _O("watch", ("sidetable", "dresser", "drawer", "safe", "coffeetable"), _LB, lookable=True),
        _O("newspaper", ("sofa", "coffeetable", "sidetable", "armchair", "diningtable"), _LB, lookable=True),
        _O("box", ("coffeetable", "sidetable", "dresser", "sofa", "armchair", "shelf"), _LB, lookable=True),
        _O("tissuebox", ("coffeetable", "sidetable", "dresser", "toilet", "countertop", "shelf"), _LBT, lookable=True),
        # bathroom
        _O("soapbar", ("countertop", "toilet", "bathtubbasin", "sinkbasin", "cabinet", "garbagecan"), _T, clean=True),
        _O("cloth", ("countertop", "cabinet", "bathtubbasin", "sinkbasin", "drawer", "toilet"), _T, clean=True),
        _O("dishsponge", ("countertop", "cabinet", "sinkbasin", "drawer", "toilet", "bathtubbasin"), _KT, clean=True),
        _O("handtowel", ("handtowelholder", "countertop", "cabinet"), _T),
        _O("towel", ("towelholder", "countertop", "cabinet", "bathtubbasin"), _T),
        _O("spraybottle", ("cabinet", "countertop", "toilet", "garbagecan", "shelf"), _T),
        _O("soapbottle", ("countertop", "cabinet", "toilet", "shelf", "garbagecan"), _T),
        _O("toiletpaper", ("toilet", "cabinet", "countertop", "drawer", "shelf", "garbagecan"), _T),
        _O("candle", ("countertop", "cabinet", "toilet", "shelf", "drawer"), _T),
    )
}

#: Room -> receptacle type -> (min, max) instances at difficulty 1.
ROOMS: dict[str, dict[str, tuple[int, int]]] = {
    "kitchen": {
        "fridge": (1, 1), "microwave": (1, 1), "sinkbasin": (1, 1), "stoveburner": (2, 4),
        "countertop": (1, 3), "cabinet": (2, 6), "drawer": (1, 4), "shelf": (0, 2),
        "diningtable": (0, 1), "coffeemachine": (1, 1), "garbagecan": (1, 1),
    },
    "livingroom": {
        "sofa": (1, 1), "armchair": (0, 2), "coffeetable": (1, 1), "sidetable": (1, 2),
        "tvstand": (0, 1), "shelf": (1, 3), "drawer": (1, 4), "cabinet": (0, 3),
        "dresser": (0, 1), "diningtable": (0, 1), "garbagecan": (1, 1), "safe": (0, 1),
    },
    "bedroom": {
        "bed": (1, 1), "desk": (1, 1), "dresser": (0, 1), "sidetable": (1, 2),
        "drawer": (2, 5), "shelf": (1, 3), "safe": (0, 1), "armchair": (0, 1), "garbagecan": (1, 1),
    },
    "bathroom": {
        "sinkbasin": (1, 1), "bathtubbasin": (1, 1), "toilet": (1, 1), "countertop": (1, 1),
        "cabinet": (2, 4), "drawer": (1, 4), "towelholder": (1, 1), "handtowelholder": (1, 1),
        "shelf": (0, 2), "garbagecan": (1, 1),
    },
}

#: Receptacle types a desk lamp may stand on (rooms with one support examine-in-light tasks).
LAMP_HOSTS: tuple[str, ...] = ("desk", "sidetable", "dresser")

#: The appliance each state-changing verb needs.
APPLIANCE: dict[str, str] = {"clean": "sinkbasin", "heat": "microwave", "cool": "fridge"}
