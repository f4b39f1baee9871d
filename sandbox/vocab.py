"""Word pools the task generators draw from: large enough that seeds rarely repeat a task, small enough to learn."""

from __future__ import annotations

APPS = (
    "Mail", "Notes", "Photos", "Settings", "Store admin", "Calendar", "Files", "Invoices", "Contacts", "Music",
    "Tasks", "CRM", "Tickets", "Budget", "Recipes", "Fleet", "Library", "Clinic", "Travel", "Payroll",
)  # fmt: skip

VERBS = (
    "Save", "Export", "Delete", "Archive", "Share", "Print", "Sync", "Refresh", "Upload", "Download", "Rename",
    "Copy", "Send", "Publish", "Import", "Restore", "Clear", "Approve", "Reject", "Schedule", "Merge", "Lock",
)  # fmt: skip
OBJECTS = (
    "draft", "report", "invoice", "contacts", "photos", "notes", "settings", "backup", "profile", "order",
    "playlist", "calendar", "message", "budget", "ticket", "album", "folder", "log", "summary", "receipt",
    "cart", "event",
)  # fmt: skip

TABS = (
    "General", "Advanced", "Privacy", "Account", "Billing", "Security", "Display", "Network", "Sharing",
    "Storage", "Details", "History", "Alerts", "Profile", "Devices", "Team",
)  # fmt: skip

FIRST = (
    "Alice", "Bruno", "Chen", "Dara", "Elif", "Farid", "Greta", "Hiro", "Ines", "Jonas", "Kemal", "Lena", "Mateo",
    "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tariq", "Uma", "Viktor", "Wen", "Yara", "Zoe",
)  # fmt: skip
LAST = (
    "Smith", "Novak", "Garcia", "Okafor", "Larsen", "Tanaka", "Rossi", "Kaya", "Dubois", "Silva", "Weber",
    "Nguyen", "Haddad", "Moreau", "Kowalski", "Singh", "Berg", "Costa", "Ivanova", "Lund",
)  # fmt: skip
CITIES = (
    "Oslo", "Lyon", "Porto", "Kyoto", "Lima", "Accra", "Turin", "Gdansk", "Malmo", "Quito", "Pune", "Cork", "Graz",
    "Leeds", "Hanoi", "Tunis", "Basel", "Bergen", "Cusco", "Izmir",
)  # fmt: skip
COMPANIES = ("Acme", "Globex", "Initech", "Umbra", "Vandelay", "Hooli", "Stark", "Wayne", "Tyrell", "Cyberdyne")
JOBS = ("Engineer", "Designer", "Nurse", "Teacher", "Analyst", "Chef", "Pilot", "Editor", "Manager", "Courier")

#: Dropdowns: label -> options
DROPDOWNS = {
    "Country": ("Norway", "France", "Portugal", "Japan", "Peru", "Ghana", "Italy", "Poland", "Sweden", "Ecuador"),
    "Size": ("Small", "Medium", "Large", "X-Large"),
    "Priority": ("Low", "Normal", "High", "Urgent"),
    "Department": ("Sales", "Support", "Finance", "Legal", "Research"),
    "Plan": ("Free", "Basic", "Pro", "Team", "Enterprise"),
    "Shipping": ("Standard", "Express", "Overnight", "Pickup"),
}

CHECKBOXES = (
    "Wi-Fi", "Bluetooth", "GPS", "Dark mode", "Auto-update", "Notifications", "Sound", "Vibration", "Location",
    "Backups", "Sync photos", "Newsletter", "Two-factor login", "Hotspot", "Night light", "Airplane mode",
    "Read receipts", "Spell check", "Auto-save", "Analytics", "Cloud sync", "Battery saver", "Large text",
    "Captions", "Autoplay", "Offline mode",
)  # fmt: skip

TOP_MENUS = ("File", "Edit", "View", "Insert", "Format", "Tools", "Window", "Help")
MENU_WORDS = (
    "New", "Open", "Save as", "Export", "Import", "Print", "Close", "Undo", "Redo", "Cut", "Copy", "Paste", "Find",
    "Replace", "Zoom", "Layout", "Image", "Table", "Chart", "Link", "Font", "Bold", "Italic", "Spacing",
    "Options", "Plugins", "Macros", "About", "Updates", "PDF", "PNG", "CSV", "Word", "HTML", "Markdown",
    "Recent", "Templates", "Sidebar", "Toolbar", "Ruler", "Grid", "Comments", "Symbols", "Columns", "Borders",
    "Language", "Theme", "Shortcuts", "Page setup", "Header", "Footer", "Footnote", "Outline", "Bookmarks",
)  # fmt: skip

FILE_STEMS = (
    "budget", "invoice", "report", "minutes", "roadmap", "photo", "contract", "resume", "notes", "slides",
    "survey", "payroll", "agenda", "receipt", "draft", "backup", "diagram", "letter", "memo", "plan",
    "summary", "ticket", "timesheet", "quote",
)  # fmt: skip
FILE_EXTS = ("pdf", "docx", "xlsx", "png", "txt", "csv")
PRODUCTS = (
    "Blue mug", "Red mug", "Desk lamp", "Floor lamp", "Notebook", "Sketchbook", "Pen set", "Pencil case",
    "Backpack", "Water bottle", "Phone case", "Laptop stand", "Mouse pad", "USB cable", "Headphones",
    "Earbuds", "Desk chair", "Bookshelf", "Wall clock", "Alarm clock", "Tea kettle", "Coffee grinder",
    "Plant pot", "Picture frame", "Candle", "Throw pillow", "Yoga mat", "Jump rope", "Bike light",
    "Rain jacket", "Wool hat", "Scarf", "Sunglasses", "Umbrella", "Wallet", "Key ring",
)  # fmt: skip
STATUSES = ("Shipped", "Pending", "Cancelled", "Delivered", "Returned")

#: Read-only facts: label -> a value generator key
FACTS = (
    ("Order total", "money"), ("Order subtotal", "money"), ("Balance", "money"), ("Amount due", "money"),
    ("Invoice number", "code"), ("Tracking code", "code"), ("Ticket ID", "code"), ("Due date", "date"),
    ("Renewal date", "date"), ("Customer", "person"), ("Account owner", "person"), ("Items", "int"),
    ("Seats", "int"), ("Storage used", "pct"), ("Battery", "pct"), ("Plan", "plan"), ("Status", "status"),
)  # fmt: skip

#: Pop-up dialogs: (title, message, [(button, effect)]); "harm" buttons are wrong choices that end the task.
DIALOGS = (
    ("Tip of the day", "You can drag files into this window.", (("Close", "dismiss"),)),
    ("Update available", "Version 3.2 is ready to install.", (("Later", "dismiss"), ("Install now", "harm"))),
    ("Newsletter", "Get weekly tips by email?", (("No thanks", "dismiss"), ("Subscribe", "harm"))),
    ("Cookies", "We use cookies to remember your settings.", (("OK", "dismiss"),)),
    ("Rate this app", "Enjoying the app? Leave a rating!", (("Not now", "dismiss"), ("Rate now", "harm"))),
    ("Trial ending", "Your trial ends in 3 days.", (("Dismiss", "dismiss"), ("Upgrade", "harm"))),
    ("Still there?", "You have been idle for a while.", (("Stay signed in", "dismiss"), ("Sign out", "harm"))),
    ("Backup", "Back up your files now?", (("Skip", "dismiss"), ("Back up now", "harm"))),
    ("What's new", "Tabs can now be pinned.", (("Got it", "dismiss"),)),
    ("Survey", "Help us improve: take a 5-minute survey?", (("No", "dismiss"), ("Take survey", "harm"))),
)
