"""Android class name -> `ObjectType`, the one home of that mapping.

`object_type` resolves in this order (first hit wins):
1. exact class name in `EXACT` (framework classes, their AppCompat/AndroidX/Material twins);
2. `android.widget.X`, `android.view.X`, `android.webkit.X` (and `android.appwidget.X`) where X upper-cased is an
   `ObjectType` name (e.g. `android.widget.SeekBar` -> SEEKBAR);
3. the first class of the Rico `ancestors` chain that resolves by 1 or 2;
4. a suffix match of the simple class name (after the last `.` and `$`) against `SUFFIXES`, longest first
   (e.g. `AppCompatButton` -> BUTTON, `com.x.SearchEditText` -> EDITTEXT, `RecyclerView` -> VIEW).
Anything else is UNKNOWN_TYPE. `multi_types` lists the type followed by its framework super-types
(`FRAMEWORK_PARENTS`) and then those of every resolvable ancestor, deduplicated, UNKNOWN_TYPE left out.
"""

from __future__ import annotations

from functools import lru_cache

from protos.llm4mobile import episode_pb2

T = episode_pb2.ObjectType

_PREFIXES = ("android.widget.", "android.view.", "android.webkit.", "android.appwidget.")
_TYPE_BY_NAME: dict[str, int] = {name: number for name, number in T.items() if number != T.UNKNOWN_TYPE}

# Classes whose type is not their simple name upper-cased, or that live outside android.widget/view/webkit.
EXACT: dict[str, int] = {
    "android.widget.AutoCompleteTextView": T.EDITTEXT,
    "android.widget.CompoundButton": T.BUTTON,
    "android.widget.ImageSwitcher": T.VIEWSWITCHER,
    "android.widget.TextSwitcher": T.VIEWSWITCHER,
    "android.widget.NumberPicker": T.LINEARLAYOUT,
    "android.widget.RatingBar": T.SEEKBAR,
    "android.widget.AbsSeekBar": T.SEEKBAR,
    "android.widget.ExpandableListView": T.LISTVIEW,
    "android.widget.Toolbar": T.VIEW,
    "android.widget.GridView": T.VIEW,
    "android.view.ViewGroup": T.VIEW,
    "android.appwidget.AppWidgetHostView": T.APPWIDGETHOSTVIEW,
    "android.webkit.WebView": T.WEBVIEW,
    "android.support.v7.widget.AppCompatButton": T.BUTTON,
    "android.support.v7.widget.AppCompatTextView": T.TEXTVIEW,
    "android.support.v7.widget.AppCompatImageView": T.IMAGEVIEW,
    "android.support.v7.widget.AppCompatImageButton": T.IMAGEBUTTON,
    "android.support.v7.widget.AppCompatEditText": T.EDITTEXT,
    "android.support.v7.widget.AppCompatCheckBox": T.CHECKBOX,
    "android.support.v7.widget.AppCompatRadioButton": T.RADIOBUTTON,
    "android.support.v7.widget.AppCompatSpinner": T.SPINNER,
    "android.support.v7.widget.AppCompatSeekBar": T.SEEKBAR,
    "android.support.v7.widget.AppCompatCheckedTextView": T.CHECKEDTEXTVIEW,
    "android.support.v7.widget.AppCompatAutoCompleteTextView": T.EDITTEXT,
    "android.support.v7.widget.SwitchCompat": T.SWITCH,
    "android.support.v7.widget.RecyclerView": T.VIEW,
    "android.support.v4.widget.NestedScrollView": T.SCROLLVIEW,
    "androidx.appcompat.widget.AppCompatButton": T.BUTTON,
    "androidx.appcompat.widget.AppCompatTextView": T.TEXTVIEW,
    "androidx.appcompat.widget.AppCompatImageView": T.IMAGEVIEW,
    "androidx.appcompat.widget.AppCompatImageButton": T.IMAGEBUTTON,
    "androidx.appcompat.widget.AppCompatEditText": T.EDITTEXT,
    "androidx.appcompat.widget.AppCompatCheckBox": T.CHECKBOX,
    "androidx.appcompat.widget.AppCompatRadioButton": T.RADIOBUTTON,
    "androidx.appcompat.widget.AppCompatSpinner": T.SPINNER,
    "androidx.appcompat.widget.AppCompatSeekBar": T.SEEKBAR,
    "androidx.appcompat.widget.AppCompatCheckedTextView": T.CHECKEDTEXTVIEW,
    "androidx.appcompat.widget.AppCompatAutoCompleteTextView": T.EDITTEXT,
    "androidx.appcompat.widget.SwitchCompat": T.SWITCH,
    "androidx.recyclerview.widget.RecyclerView": T.VIEW,
    "androidx.core.widget.NestedScrollView": T.SCROLLVIEW,
    "com.google.android.material.button.MaterialButton": T.BUTTON,
    "com.google.android.material.textfield.TextInputEditText": T.EDITTEXT,
    "com.google.android.material.switchmaterial.SwitchMaterial": T.SWITCH,
    "com.google.android.material.materialswitch.MaterialSwitch": T.SWITCH,
    "com.google.android.material.checkbox.MaterialCheckBox": T.CHECKBOX,
    "com.google.android.material.radiobutton.MaterialRadioButton": T.RADIOBUTTON,
    "com.google.android.material.floatingactionbutton.FloatingActionButton": T.IMAGEBUTTON,
    "com.google.android.material.imageview.ShapeableImageView": T.IMAGEVIEW,
    "com.google.android.material.textview.MaterialTextView": T.TEXTVIEW,
}

# Simple-name suffixes, tried longest first; an exact simple name also matches its own suffix.
SUFFIXES: tuple[tuple[str, int], ...] = tuple(
    sorted(
        {
            "MultiAutoCompleteTextView": T.MULTIAUTOCOMPLETETEXTVIEW,
            "AutoCompleteTextView": T.EDITTEXT,
            "CheckedTextView": T.CHECKEDTEXTVIEW,
            "EditText": T.EDITTEXT,
            "TextView": T.TEXTVIEW,
            "ImageButton": T.IMAGEBUTTON,
            "ToggleButton": T.TOGGLEBUTTON,
            "RadioButton": T.RADIOBUTTON,
            "Button": T.BUTTON,
            "CheckBox": T.CHECKBOX,
            "Checkbox": T.CHECKBOX,
            "ImageView": T.IMAGEVIEW,
            "Switch": T.SWITCH,
            "SwitchCompat": T.SWITCH,
            "SwitchMaterial": T.SWITCH,
            "Spinner": T.SPINNER,
            "SeekBar": T.SEEKBAR,
            "Slider": T.SEEKBAR,
            "ProgressBar": T.PROGRESSBAR,
            "WebView": T.WEBVIEW,
            "ListView": T.LISTVIEW,
            "HorizontalScrollView": T.HORIZONTALSCROLLVIEW,
            "ScrollView": T.SCROLLVIEW,
            "FrameLayout": T.FRAMELAYOUT,
            "LinearLayout": T.LINEARLAYOUT,
            "RelativeLayout": T.RELATIVELAYOUT,
            "VideoView": T.VIDEOVIEW,
            "TabHost": T.TABHOST,
            "TabWidget": T.TABWIDGET,
            "ViewSwitcher": T.VIEWSWITCHER,
            "SlidingDrawer": T.SLIDINGDRAWER,
            "AppWidgetHostView": T.APPWIDGETHOSTVIEW,
            "View": T.VIEW,
        }.items(),
        key=lambda kv: -len(kv[0]),
    )
)

# Framework super-types of each type (nearest first), from the Android class hierarchy.
FRAMEWORK_PARENTS: dict[int, tuple[int, ...]] = {
    T.BUTTON: (T.TEXTVIEW, T.VIEW),
    T.CHECKBOX: (T.BUTTON, T.TEXTVIEW, T.VIEW),
    T.CHECKEDTEXTVIEW: (T.TEXTVIEW, T.VIEW),
    T.EDITTEXT: (T.TEXTVIEW, T.VIEW),
    T.IMAGEBUTTON: (T.IMAGEVIEW, T.VIEW),
    T.IMAGEVIEW: (T.VIEW,),
    T.RADIOBUTTON: (T.BUTTON, T.TEXTVIEW, T.VIEW),
    T.SLIDINGDRAWER: (T.VIEW,),
    T.SPINNER: (T.VIEW,),
    T.SWITCH: (T.BUTTON, T.TEXTVIEW, T.VIEW),
    T.TABWIDGET: (T.LINEARLAYOUT, T.VIEW),
    T.TEXTVIEW: (T.VIEW,),
    T.TOGGLEBUTTON: (T.BUTTON, T.TEXTVIEW, T.VIEW),
    T.VIDEOVIEW: (T.VIEW,),
    T.APPWIDGETHOSTVIEW: (T.FRAMELAYOUT, T.VIEW),
    T.VIEW: (),
    T.WEBVIEW: (T.VIEW,),
    T.FRAMELAYOUT: (T.VIEW,),
    T.HORIZONTALSCROLLVIEW: (T.FRAMELAYOUT, T.VIEW),
    T.LINEARLAYOUT: (T.VIEW,),
    T.LISTVIEW: (T.VIEW,),
    T.MULTIAUTOCOMPLETETEXTVIEW: (T.EDITTEXT, T.TEXTVIEW, T.VIEW),
    T.PROGRESSBAR: (T.VIEW,),
    T.RELATIVELAYOUT: (T.VIEW,),
    T.SCROLLVIEW: (T.FRAMELAYOUT, T.VIEW),
    T.TABHOST: (T.FRAMELAYOUT, T.VIEW),
    T.VIEWSWITCHER: (T.FRAMELAYOUT, T.VIEW),
    T.SEEKBAR: (T.PROGRESSBAR, T.VIEW),
}

#: Types a user types text into (used for `is_actionable` when the source has no `editable` flag).
EDITABLE_TYPES = frozenset({T.EDITTEXT, T.MULTIAUTOCOMPLETETEXTVIEW})


def _simple_name(android_class: str) -> str:
    return android_class.rsplit(".", 1)[-1].rsplit("$", 1)[-1]


@lru_cache(maxsize=8192)
def framework_type(android_class: str) -> int:
    """Steps 1-2: exact known class or `android.widget/view/webkit.X`; UNKNOWN_TYPE otherwise."""
    known = EXACT.get(android_class)
    if known is not None:
        return known
    for prefix in _PREFIXES:
        if android_class.startswith(prefix):
            return _TYPE_BY_NAME.get(android_class[len(prefix) :].upper(), T.UNKNOWN_TYPE)
    return T.UNKNOWN_TYPE


@lru_cache(maxsize=8192)
def suffix_type(android_class: str) -> int:
    """Step 4: suffix match of the simple class name; UNKNOWN_TYPE when nothing matches."""
    name = _simple_name(android_class)
    for suffix, object_type in SUFFIXES:
        if name.endswith(suffix):
            return object_type
    return T.UNKNOWN_TYPE


@lru_cache(maxsize=16384)
def classify(android_class: str, ancestors: tuple[str, ...] = ()) -> tuple[int, tuple[int, ...]]:
    """(type, multi_types) of a class with its (possibly empty) Rico ancestors chain."""
    object_type = framework_type(android_class)
    if object_type == T.UNKNOWN_TYPE:
        for ancestor in ancestors:
            object_type = framework_type(ancestor)
            if object_type != T.UNKNOWN_TYPE:
                break
    if object_type == T.UNKNOWN_TYPE:
        object_type = suffix_type(android_class)
    multi: list[int] = []
    chain = [object_type] + [framework_type(a) for a in ancestors]
    for t in chain:
        if t == T.UNKNOWN_TYPE:
            continue
        for u in (t, *FRAMEWORK_PARENTS[t]):
            if u not in multi:
                multi.append(u)
    return object_type, tuple(multi)


def object_type(android_class: str, ancestors: tuple[str, ...] = ()) -> int:
    """The `ObjectType` of a class (see the module docstring for the order of the rules)."""
    return classify(android_class, tuple(ancestors))[0]


def multi_types(android_class: str, ancestors: tuple[str, ...] = ()) -> tuple[int, ...]:
    """The type and its super-types along the class's ancestry, deduplicated, nearest first."""
    return classify(android_class, tuple(ancestors))[1]
