"""The generated shop's world: categories, product types, attributes, options and brands.

Modelled on WebShop's five top-level categories (beauty, electronics, fashion, food,
furniture). Vocabulary is chosen so that WebShop's fuzzy matcher (token-set ratio > 85) never
confuses two *different* attributes of one category or two option values of one product type:
a near-miss distractor must really miss (``tests/envs/test_shop_reward.py`` checks this).
That rules out pairs such as "wireless" / "wireless charging" or "pack of 2" / "pack of 6",
which WebShop's matcher scores above 85.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ProductType",
    "Category",
    "CATEGORIES",
    "PRODUCT_TYPES",
    "OPTION_VALUES",
    "COLORS",
    "BRAND_SYLLABLES",
    "FILLER_SENTENCES",
    "STOPWORDS",
]


@dataclass(frozen=True, slots=True)
class ProductType:
    """A kind of product: what a shopper names when they say what they want.

    Attributes:
        name: the type as written in titles and instructions ("dry shampoo").
        nouns: the head noun(s), the structured stand-in for WebShop's spaCy noun parse
            used by the type factor ("shampoo").
        path: the category path, top level first (3-4 levels, joined with " › ").
        category: the top-level key into :data:`CATEGORIES`.
        group: the attribute group of the category that fits this type (hair care, shoes...).
        options: option dimensions as ``display_name:vocabulary`` keys into :data:`OPTION_VALUES`.
        price: the (low, high) price range in dollars.
    """

    name: str
    nouns: tuple[str, ...]
    path: tuple[str, ...]
    category: str
    group: str
    options: tuple[str, ...]
    price: tuple[float, float]


@dataclass(frozen=True, slots=True)
class Category:
    """A top-level category: its attribute pool, the pool's groups, and attribute paraphrases.

    Attributes:
        key: the category key (``beauty``...).
        attributes: every attribute phrase of the category (pairwise fuzzy-distinct).
        synonyms: paraphrases of attributes used by instruction paraphrase level 2.
        groups: attribute subsets that make sense together for a group of product types
            (a shampoo is not "v neck"); each entry is a subset of ``attributes``.
    """

    key: str
    attributes: tuple[str, ...]
    synonyms: dict[str, tuple[str, ...]]
    groups: dict[str, tuple[str, ...]]


# Colors: no color is a token subset of another ("rose gold" and "gold" would fuzz-match).
COLORS: tuple[str, ...] = (
    "black", "white", "navy", "burgundy", "beige", "charcoal", "teal", "olive", "ivory",
    "coral", "lavender", "mustard", "turquoise", "maroon", "khaki", "silver", "pink",
    "red", "green", "brown", "purple", "orange", "yellow", "gray", "blue", "walnut",
    "espresso", "oak", "natural",
)

OPTION_VALUES: dict[str, tuple[str, ...]] = {
    "color": COLORS[:25],
    "finish": ("walnut", "espresso", "oak", "white", "black", "gray", "natural", "cherry", "teak"),
    "shade": ("nude", "ruby", "mauve", "berry", "plum", "coral", "peach", "crimson", "rose", "mocha"),
    "apparel": ("xs", "small", "medium", "large", "xl", "xxl", "3xl"),
    "shoe": ("size 5", "size 6", "size 7", "size 8", "size 9", "size 10"),
    "oz": ("3 oz", "8 oz", "12 oz", "16 oz", "24 oz"),
    "ml": ("30 ml", "50 ml", "75 ml", "100 ml", "200 ml"),
    "pack": ("1 pack", "2 pack", "3 pack", "4 pack", "6 pack", "8 pack"),
    "count": ("12 ct", "20 ct", "36 ct", "48 ct", "96 ct"),
    "scent": ("lavender", "rose", "vanilla", "coconut", "unscented", "citrus", "eucalyptus", "sandalwood"),
    "flavor": ("sea salt", "barbecue", "sour cream", "jalapeno", "original", "honey", "cheddar", "chili lime"),
    "sweet": ("original", "caramel", "mint", "cinnamon", "vanilla", "peanut butter", "raspberry", "coconut"),
    "tea": ("mint", "lemon", "ginger", "chamomile", "jasmine", "original", "honey"),
    "roast": ("light roast", "medium roast", "dark roast", "espresso roast", "decaf"),
    "length": ("3 ft", "6 ft", "10 ft", "15 ft"),
    "capacity": ("32gb", "64gb", "128gb", "256gb", "512gb"),
    "device": ("iphone 15", "galaxy s24", "pixel 8", "moto g", "oneplus 12"),
    "style": ("modern", "rustic", "farmhouse", "industrial", "scandinavian", "vintage"),
    "fit": ("regular", "slim", "relaxed", "athletic"),
    "furniture_size": ("small", "medium", "large", "oversized"),
}

CATEGORIES: dict[str, Category] = {
    "beauty": Category(
        "beauty",
        (
            "paraben free", "sulfate free", "cruelty free", "long lasting", "natural ingredients",
            "fragrance free", "dry skin", "sensitive skin", "oily hair", "vegan formula",
            "travel size", "easy to apply", "non toxic", "certified organic", "hyaluronic acid",
            "argan oil", "damaged hair", "anti aging", "dermatologist tested", "tea tree",
        ),
        {
            "paraben free": ("without parabens", "no parabens"),
            "sulfate free": ("without sulfates", "no sulfates"),
            "cruelty free": ("not tested on animals",),
            "long lasting": ("that lasts all day", "long wearing"),
            "fragrance free": ("unscented formula", "without added fragrance"),
            "travel size": ("small enough to travel with", "travel friendly"),
            "easy to apply": ("simple to apply",),
            "non toxic": ("free of toxins",),
            "anti aging": ("that reduces wrinkles",),
        },
        {
            "hair": ("paraben free", "sulfate free", "cruelty free", "natural ingredients", "fragrance free", "oily hair", "vegan formula", "travel size", "certified organic", "argan oil", "damaged hair", "tea tree", "non toxic",),
            "skin": ("paraben free", "cruelty free", "natural ingredients", "fragrance free", "dry skin", "sensitive skin", "vegan formula", "travel size", "non toxic", "certified organic", "hyaluronic acid", "anti aging", "dermatologist tested", "tea tree",),
            "makeup": ("paraben free", "cruelty free", "long lasting", "natural ingredients", "vegan formula", "travel size", "easy to apply", "non toxic", "dermatologist tested", "sensitive skin",),
            "fragrance": ("long lasting", "natural ingredients", "cruelty free", "vegan formula", "travel size", "paraben free", "non toxic",),
        },
    ),
    "electronics": Category(
        "electronics",
        (
            "bluetooth", "noise cancelling", "water resistant", "fast charging", "battery life",
            "usb c", "high definition", "easy to carry", "lightweight", "heavy duty",
            "compact design", "plug and play", "quick release", "dual band", "hands free",
            "shockproof", "touch control", "stereo sound", "aluminum alloy", "wall mount",
        ),
        {
            "noise cancelling": ("that blocks out noise",),
            "water resistant": ("waterproof", "that can get wet"),
            "fast charging": ("quick charge", "that charges fast"),
            "battery life": ("long battery",),
            "easy to carry": ("portable",),
            "lightweight": ("light weight", "not heavy"),
            "heavy duty": ("sturdy", "durable"),
            "hands free": ("handsfree",),
            "shockproof": ("drop proof", "shock absorbing"),
        },
        {
            "computer": ("bluetooth", "usb c", "lightweight", "compact design", "plug and play", "easy to carry", "heavy duty", "aluminum alloy", "quick release", "touch control", "battery life", "dual band",),
            "audio": ("bluetooth", "noise cancelling", "water resistant", "battery life", "hands free", "stereo sound", "lightweight", "touch control", "fast charging", "usb c", "easy to carry", "wall mount",),
            "phone": ("fast charging", "usb c", "shockproof", "water resistant", "lightweight", "heavy duty", "easy to carry", "compact design", "high definition", "quick release", "aluminum alloy",),
            "camera": ("lightweight", "heavy duty", "aluminum alloy", "quick release", "easy to carry", "compact design", "water resistant", "high definition", "bluetooth",),
        },
    ),
    "fashion": Category(
        "fashion",
        (
            "machine wash", "long sleeve", "short sleeve", "button closure", "rubber sole",
            "breathable fabric", "quick drying", "cotton blend", "polyester spandex",
            "faux leather", "non slip", "pull on", "elastic waist", "high waist",
            "moisture wicking", "lace up", "zipper pocket", "hand wash", "soft material", "v neck",
        ),
        {
            "machine wash": ("machine washable",),
            "breathable fabric": ("that breathes well",),
            "quick drying": ("dries quickly", "quick dry"),
            "non slip": ("anti slip", "slip resistant"),
            "moisture wicking": ("sweat wicking",),
            "soft material": ("very soft",),
            "hand wash": ("hand washable",),
        },
        {
            "clothing": ("machine wash", "long sleeve", "short sleeve", "button closure", "breathable fabric", "quick drying", "cotton blend", "polyester spandex", "elastic waist", "high waist", "moisture wicking", "zipper pocket", "hand wash", "soft material", "v neck", "pull on",),
            "shoes": ("rubber sole", "breathable fabric", "non slip", "lace up", "faux leather", "pull on", "quick drying", "soft material", "moisture wicking", "machine wash",),
            "accessories": ("faux leather", "zipper pocket", "machine wash", "hand wash", "soft material", "cotton blend", "breathable fabric", "polyester spandex", "quick drying",),
        },
    ),
    "food": Category(
        "food",
        (
            "gluten free", "sugar free", "non gmo", "low calorie", "keto friendly",
            "usda organic", "high protein", "low sodium", "dairy free", "kosher certified",
            "plant based", "individually wrapped", "ready to eat", "caffeine free", "fair trade",
            "whole grain", "nut free", "resealable bag", "no artificial colors", "shelf stable",
        ),
        {
            "gluten free": ("without gluten", "no gluten"),
            "sugar free": ("with no sugar", "without sugar"),
            "non gmo": ("gmo free",),
            "low calorie": ("light on calories",),
            "dairy free": ("without dairy", "lactose free"),
            "plant based": ("vegan",),
            "ready to eat": ("no cooking needed",),
            "nut free": ("without nuts",),
        },
        {
            "snack": ("gluten free", "sugar free", "non gmo", "low calorie", "keto friendly", "usda organic", "high protein", "low sodium", "dairy free", "kosher certified", "plant based", "individually wrapped", "ready to eat", "whole grain", "nut free", "resealable bag", "no artificial colors", "shelf stable", "fair trade",),
            "drink": ("non gmo", "usda organic", "caffeine free", "fair trade", "kosher certified", "sugar free", "low calorie", "gluten free", "plant based", "shelf stable", "no artificial colors",),
            "pantry": ("non gmo", "usda organic", "kosher certified", "gluten free", "low sodium", "plant based", "fair trade", "shelf stable", "dairy free",),
        },
    ),
    "furniture": Category(
        "furniture",
        (
            "easy assembly", "solid wood", "storage space", "mid century", "space saving",
            "engineered wood", "metal frame", "height adjustable", "living room",
            "modern design", "easy clean", "lumbar support", "bedroom furniture",
            "tempered glass", "steel legs", "upholstered seat", "wood finish", "weight capacity",
            "home office", "anti tip",
        ),
        {
            "easy assembly": ("easy to assemble", "quick to put together"),
            "solid wood": ("made of real wood",),
            "storage space": ("with room for storage",),
            "space saving": ("compact",),
            "height adjustable": ("adjustable height",),
            "easy clean": ("easy to clean", "wipes clean"),
            "living room": ("for the living room",),
            "home office": ("for a home office",),
        },
        {
            "seating": ("lumbar support", "height adjustable", "upholstered seat", "metal frame", "steel legs", "easy assembly", "weight capacity", "modern design", "mid century", "solid wood", "easy clean", "home office", "living room", "space saving",),
            "other": ("easy assembly", "solid wood", "storage space", "mid century", "space saving", "engineered wood", "metal frame", "living room", "modern design", "easy clean", "bedroom furniture", "tempered glass", "steel legs", "wood finish", "weight capacity", "home office", "anti tip", "height adjustable",),
        },
    ),
}

_BEAUTY = "Beauty & Personal Care"
_ELEC = "Electronics"
_FASH = "Clothing, Shoes & Jewelry"
_FOOD = "Grocery & Gourmet Food"
_HOME = "Home & Kitchen"


def _t(name: str, nouns: str, path: str, group: str, options: str, price: tuple[float, float]) -> ProductType:
    category, _, sub = group.partition("/")
    return ProductType(name, tuple(nouns.split()), tuple(p.strip() for p in path.split("›")), category, sub,
                       tuple(options.split()), price)


PRODUCT_TYPES: tuple[ProductType, ...] = (
    # beauty
    _t("shampoo", "shampoo", f"{_BEAUTY} › Hair Care › Shampoo & Conditioner › Shampoos", "beauty/hair", "scent:scent size:oz pack:pack", (6, 38)),
    _t("conditioner", "conditioner", f"{_BEAUTY} › Hair Care › Shampoo & Conditioner › Conditioners", "beauty/hair", "scent:scent size:oz pack:pack", (6, 36)),
    _t("dry shampoo", "shampoo", f"{_BEAUTY} › Hair Care › Shampoo & Conditioner › Dry Shampoos", "beauty/hair", "scent:scent size:oz", (5, 28)),
    _t("hair mask", "hair mask", f"{_BEAUTY} › Hair Care › Hair Treatments › Masks", "beauty/hair", "scent:scent size:oz", (8, 40)),
    _t("hair oil", "hair oil", f"{_BEAUTY} › Hair Care › Hair Treatments › Oils", "beauty/hair", "scent:scent size:ml pack:pack", (7, 45)),
    _t("face moisturizer", "face moisturizer", f"{_BEAUTY} › Skin Care › Face › Moisturizers", "beauty/skin", "size:ml pack:pack", (9, 65)),
    _t("face serum", "face serum", f"{_BEAUTY} › Skin Care › Face › Serums", "beauty/skin", "size:ml", (10, 80)),
    _t("face wash", "face wash", f"{_BEAUTY} › Skin Care › Face › Cleansers", "beauty/skin", "scent:scent size:oz pack:pack", (6, 30)),
    _t("eye cream", "eye cream", f"{_BEAUTY} › Skin Care › Eyes › Creams", "beauty/skin", "size:ml", (12, 70)),
    _t("body lotion", "body lotion", f"{_BEAUTY} › Skin Care › Body › Lotions", "beauty/skin", "scent:scent size:oz pack:pack", (5, 32)),
    _t("lipstick", "lipstick", f"{_BEAUTY} › Makeup › Lips › Lipstick", "beauty/makeup", "color:shade pack:pack", (5, 35)),
    _t("lip balm", "lip balm", f"{_BEAUTY} › Makeup › Lips › Balms", "beauty/makeup", "flavor:scent pack:pack", (3, 18)),
    _t("mascara", "mascara", f"{_BEAUTY} › Makeup › Eyes › Mascara", "beauty/makeup", "color:shade pack:pack", (6, 32)),
    _t("eyeshadow palette", "eyeshadow palette", f"{_BEAUTY} › Makeup › Eyes › Eyeshadow", "beauty/makeup", "color:shade", (9, 55)),
    _t("perfume", "perfume", f"{_BEAUTY} › Fragrance › Women's › Eau de Parfum", "beauty/fragrance", "scent:scent size:ml", (18, 120)),
    # electronics
    _t("wireless mouse", "mouse", f"{_ELEC} › Computers & Accessories › Keyboards, Mice & Accessories › Mice", "electronics/computer", "color:color", (9, 60)),
    _t("mechanical keyboard", "keyboard", f"{_ELEC} › Computers & Accessories › Keyboards, Mice & Accessories › Keyboards", "electronics/computer", "color:color", (25, 160)),
    _t("laptop stand", "laptop stand", f"{_ELEC} › Computers & Accessories › Laptop Accessories › Stands", "electronics/computer", "color:color", (15, 70)),
    _t("usb hub", "usb hub", f"{_ELEC} › Computers & Accessories › Hubs", "electronics/computer", "color:color length:length", (10, 55)),
    _t("headphones", "headphones", f"{_ELEC} › Headphones › Over-Ear Headphones", "electronics/audio", "color:color", (20, 300)),
    _t("earbuds", "earbuds", f"{_ELEC} › Headphones › Earbud Headphones", "electronics/audio", "color:color", (15, 220)),
    _t("phone case", "phone case", f"{_ELEC} › Cell Phones & Accessories › Cases & Covers", "electronics/phone", "color:color model:device", (8, 45)),
    _t("screen protector", "screen protector", f"{_ELEC} › Cell Phones & Accessories › Screen Protectors", "electronics/phone", "model:device pack:pack", (6, 25)),
    _t("charging cable", "cable", f"{_ELEC} › Cell Phones & Accessories › Cables", "electronics/phone", "color:color length:length pack:pack", (6, 30)),
    _t("bluetooth speaker", "speaker", f"{_ELEC} › Home Audio › Speakers › Portable Speakers", "electronics/audio", "color:color", (20, 180)),
    _t("soundbar", "soundbar", f"{_ELEC} › Home Audio › Speakers › Sound Bars", "electronics/audio", "color:color", (60, 400)),
    _t("camera tripod", "tripod", f"{_ELEC} › Camera & Photo › Tripods & Monopods", "electronics/camera", "color:color", (15, 120)),
    _t("memory card", "memory card", f"{_ELEC} › Computers & Accessories › Memory Cards", "electronics/computer", "capacity:capacity pack:pack", (7, 90)),
    _t("power bank", "power bank", f"{_ELEC} › Cell Phones & Accessories › Chargers & Power Adapters › Power Banks", "electronics/phone", "color:color", (15, 80)),
    _t("smart watch band", "watch band", f"{_ELEC} › Wearable Technology › Accessories › Bands", "electronics/phone", "color:color size:apparel", (6, 30)),
    # fashion
    _t("dress", "dress", f"{_FASH} › Women › Clothing › Dresses", "fashion/clothing", "color:color size:apparel", (18, 90)),
    _t("blouse", "blouse", f"{_FASH} › Women › Clothing › Tops, Tees & Blouses", "fashion/clothing", "color:color size:apparel", (14, 60)),
    _t("women's t-shirt", "t shirt", f"{_FASH} › Women › Clothing › Tops, Tees & Blouses › T-Shirts", "fashion/clothing", "color:color size:apparel", (9, 35)),
    _t("men's t-shirt", "t shirt", f"{_FASH} › Men › Clothing › Shirts › T-Shirts", "fashion/clothing", "color:color size:apparel fit:fit", (9, 35)),
    _t("dress shirt", "shirt", f"{_FASH} › Men › Clothing › Shirts › Dress Shirts", "fashion/clothing", "color:color size:apparel fit:fit", (20, 70)),
    _t("polo shirt", "polo shirt", f"{_FASH} › Men › Clothing › Shirts › Polos", "fashion/clothing", "color:color size:apparel fit:fit", (15, 60)),
    _t("jeans", "jeans", f"{_FASH} › Men › Clothing › Jeans", "fashion/clothing", "color:color size:apparel fit:fit", (25, 95)),
    _t("leggings", "leggings", f"{_FASH} › Women › Clothing › Active › Leggings", "fashion/clothing", "color:color size:apparel", (12, 55)),
    _t("hoodie", "hoodie", f"{_FASH} › Men › Clothing › Active › Sweatshirts & Hoodies", "fashion/clothing", "color:color size:apparel", (20, 75)),
    _t("running shoes", "shoes", f"{_FASH} › Men › Shoes › Athletic › Running", "fashion/shoes", "color:color size:shoe", (35, 160)),
    _t("sneakers", "sneakers", f"{_FASH} › Women › Shoes › Fashion Sneakers", "fashion/shoes", "color:color size:shoe", (30, 140)),
    _t("ankle boots", "boots", f"{_FASH} › Women › Shoes › Boots › Ankle & Bootie", "fashion/shoes", "color:color size:shoe", (35, 180)),
    _t("slippers", "slippers", f"{_FASH} › Women › Shoes › Slippers", "fashion/shoes", "color:color size:shoe", (12, 50)),
    _t("tote bag", "tote bag", f"{_FASH} › Women › Handbags & Wallets › Totes", "fashion/accessories", "color:color", (20, 120)),
    _t("baseball cap", "cap", f"{_FASH} › Men › Accessories › Hats & Caps › Baseball Caps", "fashion/accessories", "color:color", (10, 40)),
    # food
    _t("potato chips", "chips", f"{_FOOD} › Snack Foods › Chips & Crisps › Potato", "food/snack", "flavor:flavor size:oz pack:pack", (3, 30)),
    _t("tortilla chips", "chips", f"{_FOOD} › Snack Foods › Chips & Crisps › Tortilla", "food/snack", "flavor:flavor size:oz pack:pack", (3, 28)),
    _t("protein bar", "bar", f"{_FOOD} › Snack Foods › Bars › Protein Bars", "food/snack", "flavor:sweet size:count", (10, 45)),
    _t("cookies", "cookies", f"{_FOOD} › Snack Foods › Cookies", "food/snack", "flavor:sweet size:oz pack:pack", (4, 30)),
    _t("ground coffee", "coffee", f"{_FOOD} › Beverages › Coffee › Ground Coffee", "food/drink", "roast:roast size:oz pack:pack", (7, 40)),
    _t("coffee pods", "coffee pods", f"{_FOOD} › Beverages › Coffee › Single-Serve Capsules & Pods", "food/drink", "roast:roast size:count", (10, 55)),
    _t("green tea", "tea", f"{_FOOD} › Beverages › Tea › Green", "food/drink", "flavor:tea size:count pack:pack", (5, 30)),
    _t("herbal tea", "tea", f"{_FOOD} › Beverages › Tea › Herbal", "food/drink", "flavor:tea size:count pack:pack", (5, 30)),
    _t("almonds", "almonds", f"{_FOOD} › Pantry Staples › Nuts & Seeds › Almonds", "food/snack", "flavor:flavor size:oz pack:pack", (6, 40)),
    _t("dark chocolate", "chocolate", f"{_FOOD} › Candy & Chocolate › Chocolate Bars", "food/snack", "flavor:sweet size:oz pack:pack", (4, 35)),
    _t("olive oil", "olive oil", f"{_FOOD} › Pantry Staples › Cooking & Baking › Oils", "food/pantry", "size:ml pack:pack", (8, 50)),
    _t("granola", "granola", f"{_FOOD} › Breakfast Foods › Cereals › Granola", "food/snack", "flavor:sweet size:oz pack:pack", (4, 28)),
    # furniture
    _t("coffee table", "coffee table", f"{_HOME} › Furniture › Living Room Furniture › Tables", "furniture/other", "color:finish style:style", (50, 400)),
    _t("tv stand", "tv stand", f"{_HOME} › Furniture › Living Room Furniture › TV Stands", "furniture/other", "color:finish size:furniture_size", (60, 450)),
    _t("bookshelf", "bookshelf", f"{_HOME} › Furniture › Living Room Furniture › Bookcases", "furniture/other", "color:finish size:furniture_size", (40, 300)),
    _t("nightstand", "nightstand", f"{_HOME} › Furniture › Bedroom Furniture › Nightstands", "furniture/other", "color:finish style:style", (30, 200)),
    _t("dresser", "dresser", f"{_HOME} › Furniture › Bedroom Furniture › Dressers", "furniture/other", "color:finish size:furniture_size", (90, 600)),
    _t("bed frame", "bed frame", f"{_HOME} › Furniture › Bedroom Furniture › Beds & Frames", "furniture/other", "color:finish size:furniture_size", (90, 700)),
    _t("office chair", "chair", f"{_HOME} › Furniture › Home Office Furniture › Chairs", "furniture/seating", "color:color", (60, 450)),
    _t("standing desk", "desk", f"{_HOME} › Furniture › Home Office Furniture › Desks", "furniture/other", "color:finish size:furniture_size", (120, 800)),
    _t("bar stool", "stool", f"{_HOME} › Furniture › Kitchen & Dining Room Furniture › Stools", "furniture/seating", "color:finish pack:pack", (40, 260)),
    _t("floor lamp", "lamp", f"{_HOME} › Lighting & Ceiling Fans › Lamps & Shades › Floor Lamps", "furniture/other", "color:color style:style", (30, 220)),
    _t("shoe rack", "shoe rack", f"{_HOME} › Storage & Organization › Clothing & Closet Storage › Shoe Organizers", "furniture/other", "color:finish size:furniture_size", (20, 120)),
)

# Brand names are built from these syllables with the catalog's own RNG.
BRAND_SYLLABLES: tuple[str, ...] = (
    "lu", "mo", "ra", "vel", "tix", "zen", "ka", "no", "bri", "sto", "qua", "fel", "dor",
    "mi", "sa", "ver", "lo", "ti", "pra", "gon", "ha", "ne", "xo", "cor", "bel", "un",
)

# Generic sentences mixed into descriptions: realistic noise for the search engine.
FILLER_SENTENCES: tuple[str, ...] = (
    "Backed by our customer satisfaction promise.",
    "Makes a thoughtful gift for family and friends.",
    "Designed and tested by a small team that cares about quality.",
    "Each order ships in recyclable packaging.",
    "Thousands of happy customers use it every day.",
    "Please check the size chart and photos before ordering.",
    "Colors may vary slightly due to screen settings.",
    "Our support team answers every question within a day.",
    "A reliable everyday choice at a fair price.",
    "Compare with similar products and see the difference.",
)

STOPWORDS: frozenset[str] = frozenset(
    "a an and are as at be but by for from has have i if in into is it its me my need of on or "
    "our so than that the their them then there these this to was we were will with you your "
    "am looking want would like please some any buy find get".split()
)
